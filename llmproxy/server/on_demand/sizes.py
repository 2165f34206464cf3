"""Memory sizes: as a config file writes them ("6GiB", "512 MB", a number of bytes), and as measured.

A model's footprint is guessed from its GGUF file's size, which the weights take once mapped, plus a
quarter for the context's cache and buffers, and raised to what the process grew by when it loaded (its
resident set, from /proc) where that was more (SmolLM2-135M at n_ctx 512: 98 MB file, 125 MB grown; Gemma
3 270M: 253 MB file, 277 MB grown).
"""

from __future__ import annotations

import re
from pathlib import Path

from llmproxy.errors import ConfigurationError

UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
         "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tb": 1000**4, "tib": 1024**4}
GGUF_OVERHEAD = 1.25


def parse_size(value: int | float | str, what: str) -> int:
    """Bytes, from a number of bytes or a string such as "6GiB" or "512 MB"; ConfigurationError otherwise."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{what}: a size such as \"4GiB\" or a number of bytes, not {value!r}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", value)
        if found is None or found.group(2).lower() not in UNITS:
            raise ConfigurationError(f"{what}: a size such as \"4GiB\", \"512MB\" or a number of bytes, not {value!r}")
        number, unit = float(found.group(1)), found.group(2).lower()
    size = int(number * UNITS[unit])
    if size <= 0:
        raise ConfigurationError(f"{what}: must be more than 0 bytes, not {value!r}")
    return size


def resident_bytes() -> int | None:
    """This process's resident memory (Linux), None where /proc does not tell."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def gguf_guess(path: Path) -> int:
    """A GGUF model's footprint before it has ever loaded: its file, and a quarter more."""
    return int(path.stat().st_size * GGUF_OVERHEAD)
