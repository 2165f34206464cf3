"""The server's models loaded on demand: each one's control, the scheduler over them, and what the rest
of the server asks of them (a request's lane, /v1/models facts, /health's log lines, /metrics).

Which models it takes: every embedded model, every model with a ``command``, every Ollama model and
every model on llama.cpp's router (``router = true``); a model on an HTTP server llmproxy neither
starts nor commands is not scheduled (its server decides what it holds). LM Studio's models are not
scheduled either, but given their ttl and their state read from LM Studio (llmproxy.server.on_demand.lmstudio).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmproxy.backends.embedded import EmbeddedBackend
from llmproxy.backends.lmstudio import LMStudioBackend
from llmproxy.errors import ConfigurationError
from llmproxy.route import Route
from llmproxy.server.lanes import Lane
from llmproxy.server.on_demand.controls import EmbeddedControl
from llmproxy.server.on_demand.lane import OnDemandLane
from llmproxy.server.on_demand.lmstudio import LMStudioModel, refresh
from llmproxy.server.on_demand.process import ProcessControl
from llmproxy.server.on_demand.remote import OllamaControl, RouterControl
from llmproxy.server.on_demand.scheduler import Control, Resident, Scheduler
from llmproxy.server.on_demand.sizes import gguf_guess
from llmproxy.server.on_demand.spec import ModelPlan, OnDemandSpec


class OnDemand:
    """The models of ``spec`` among ``routes`` (model name -> route), scheduled together."""

    def __init__(self, spec: OnDemandSpec, routes: Mapping[str, Route]) -> None:
        self.spec = spec
        self.processes: dict[str, ProcessControl] = {}
        self.lmstudio: dict[str, LMStudioModel] = {}  # loaded by LM Studio itself
        residents = []
        backends: dict[int, str] = {}
        for name, plan in spec.models.items():
            route = routes[name]
            other = backends.setdefault(id(route.backend), name)
            if other != name:
                raise ConfigurationError(f"models {other!r} and {name!r} are the same model loaded twice; make one "
                                         f"an alias of the other ([aliases])")
            if not scheduled(route, plan):
                if isinstance(route.backend, LMStudioBackend):
                    self.lmstudio[name] = LMStudioModel(route.backend, 0.0 if name == spec.keep else plan.ttl)
                continue
            control = self._control(name, route, plan, keep=name == spec.keep)
            memory = plan.memory if plan.memory is not None else _guess(route)
            residents.append(Resident(name, control, memory=memory, ttl=plan.ttl, keep=name == spec.keep,
                                      measure=plan.memory is None))
        self.scheduler = Scheduler(residents, spec.budget, spec.max_wait)

    def _control(self, name: str, route: Route, plan: ModelPlan, keep: bool) -> Control:
        backend = route.backend
        if plan.command is not None:
            process = ProcessControl(plan.command, backend, plan.start_timeout,
                                     on_exit=lambda: self.scheduler.died(name))
            self.processes[name] = process
            return process
        if isinstance(backend, EmbeddedBackend):
            return EmbeddedControl(backend)
        try:
            if plan.router:
                return RouterControl(backend, plan.start_timeout)
            return OllamaControl(backend, plan.start_timeout, 0.0 if keep else plan.ttl)
        except ValueError as exc:
            raise ConfigurationError(f"model {name!r}: {exc}") from None

    def manages(self, name: str) -> bool:
        return name in self.scheduler.residents

    def lane(self, name: str, inner: Lane, limit: int) -> Lane:
        """A request's lane to model ``name``: through the scheduler where it loads on demand."""
        if name not in self.scheduler.residents:
            return inner
        return OnDemandLane(inner, self.scheduler, name, limit)

    def start(self) -> None:
        self.scheduler.start([name for name, plan in self.spec.models.items() if plan.preload and self.manages(name)])

    async def stop(self) -> None:
        await self.scheduler.stop()

    async def refresh(self) -> None:
        """Read the state of the models LM Studio loads, for ``facts``."""
        if self.lmstudio:
            await refresh(self.lmstudio.values())

    def facts(self, name: str) -> dict[str, Any] | None:
        """What /v1/models and the inspector say of the model's loading (None: not loaded on demand); for
        LM Studio's models, what ``refresh`` last read."""
        if name in self.lmstudio:
            return self.lmstudio[name].facts()
        resident = self.scheduler.residents.get(name)
        if resident is None:
            return None
        facts: dict[str, Any] = {
            "state": resident.state, "memory_bytes": resident.memory, "measured": resident.measured is not None,
            "ttl": resident.ttl, "kept_loaded": resident.keep, "in_use": resident.users,
            "waiting": len(resident.waiting), "loads": resident.loads,
            "last_load_seconds": resident.last_load_seconds, "error": resident.error,
        }
        process = self.processes.get(name)
        if process is not None:
            facts["process"] = {"pid": process.process.pid if process.process else None, "starts": process.starts,
                                "exit_code": process.exit_code}
        return facts

    def log_lines(self, name: str) -> list[str] | None:
        """The last lines a started server wrote (None: the model has no command)."""
        process = self.processes.get(name)
        return list(process.log) if process is not None else None


def scheduled(route: Route, plan: ModelPlan) -> bool:
    """Whether the scheduler loads and unloads the model: in this process, by starting its server, or by
    commanding its server (Ollama, llama.cpp's router)."""
    return (plan.command is not None or isinstance(route.backend, EmbeddedBackend) or plan.router
            or route.backend.name == "ollama")


def _guess(route: Route) -> int:
    """Bytes a model takes before it ever loaded: from its GGUF file, else nothing (a server's own memory)."""
    backend = route.backend
    return gguf_guess(backend.model_path) if isinstance(backend, EmbeddedBackend) else 0
