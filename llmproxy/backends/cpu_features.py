"""The CPU features llama.cpp must not use: on a CPU with Intel AMX (Sapphire Rapids and later),
llama-cpp-python 0.3.36 built from source puts the weights in AMX buffers, and its AMX matrix product
then crashes the process (a segmentation fault in ``ggml_backend_amx_mul_mat``, on the first prompt).

``load_without_amx`` makes every model the process loads keep its weights in plain CPU buffers on such a
CPU (llama.cpp's ``use_extra_bufts`` off, as ``llama-server --no-repack``), and changes nothing elsewhere:
elsewhere those buffers hold repacked weights that make some quantisations faster.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

logger = logging.getLogger("llmproxy.backends")


def cpu_has_amx(cpuinfo: str | None = None) -> bool:
    """Whether the CPU reports AMX tiles (Linux's ``amx_tile`` flag); ``cpuinfo``: /proc/cpuinfo's text."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:  # not Linux: llama.cpp's AMX code is built for Linux only
            return False
    return any(line.startswith("flags") and "amx_tile" in line.split() for line in cpuinfo.splitlines())


@functools.cache
def load_without_amx() -> bool:
    """On a CPU with AMX, every model loaded afterwards in this process keeps its weights out of llama.cpp's
    extra buffers; whether it did so. Idempotent."""
    if not cpu_has_amx():
        return False
    import llama_cpp.llama_cpp as native

    defaults = native.llama_model_default_params

    def without_extra_buffers():  # noqa: ANN202 - llama-cpp-python's ctypes struct
        params = defaults()
        params.use_extra_bufts = False
        return params

    native.llama_model_default_params = without_extra_buffers
    logger.info("this CPU has AMX: models load without llama.cpp's extra weight buffers, whose AMX code crashes")
    return True
