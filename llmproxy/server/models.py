"""The models a server answers to: which route serves a request's ``model``, and what /v1/models says.

Each model's entry carries its facts where clients look for them: its context length as LM Studio and
Letta read it (``context_length``) and as vLLM writes it (``max_model_len``): the configured context, else
the one its backend reports it loaded; and, in llmproxy's own field, what it takes (tools, grammars),
whether it embeds and its embeddings' length.

A request naming no model goes to the default model, else to the first. One naming a model that is
not served goes to the first alias whose glob pattern matches it (``claude-*``: Claude Code sends
Claude's names, Codex OpenAI's), else to the default model where there is one (a server started with
flags has its one model as default, so clients that send names such as ``gpt-4o-mini`` work), else
is a 404 listing the known names and aliases (llmproxy.server.config says when a config file has a
default).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from llmproxy.errors import ConfigurationError, ModelNotFoundError
from llmproxy.route import Route


class Models:
    """Routes by the name clients ask for them under."""

    def __init__(self, routes: dict[str, Route], default: str | None = None,
                 aliases: Mapping[str, str] | None = None) -> None:
        if not routes:
            raise ConfigurationError("the server needs at least one model to serve")
        if default is not None and default not in routes:
            raise ConfigurationError(f"the default model {default!r} is not one of those served: {', '.join(routes)}")
        for pattern, name in (aliases or {}).items():
            if name not in routes:
                raise ConfigurationError(f"alias {pattern!r} names {name!r}, which is not one of those served: "
                                         f"{', '.join(routes)}")
        self.routes = routes
        self.aliases = dict(aliases or {})
        self._fallback = routes[default] if default is not None else None  # also answers unknown names
        self._first = next(iter(routes.values()))
        self.created = int(time.time())
        # A model loaded on demand: its state and facts (llmproxy.server.on_demand); None for the others.
        self.facts: Callable[[str], dict[str, Any] | None] = lambda name: None

    def route(self, name: str | None) -> Route:
        """The route that answers a request naming ``name``."""
        if not name:
            return self._fallback or self._first
        route = self.routes.get(name) or self._aliased(name) or self._fallback
        if route is None:
            raise self._not_found(name)
        return route

    def _aliased(self, name: str) -> Route | None:
        for pattern, target in self.aliases.items():
            if fnmatchcase(name, pattern):
                return self.routes[target]
        return None

    def card(self, name: str) -> dict[str, Any]:
        """OpenAI's model object for a served name (GET /v1/models/{name}); only served names have one."""
        route = self.routes.get(name)
        if route is None:
            raise self._not_found(name)
        return self._card(name, route)

    def cards(self) -> list[dict[str, Any]]:
        """Every served model's object (GET /v1/models)."""
        return [self._card(name, route) for name, route in self.routes.items()]

    def _card(self, name: str, route: Route) -> dict[str, Any]:
        window = context_length(route)
        card = {"id": name, "object": "model", "created": self.created, "owned_by": "llmproxy",
                "context_length": window, "max_model_len": window,
                "llmproxy": {"backend": route.backend.name, "wrapper": route.wrapper.name, "grammar": route.grammar,
                             "context_window": window, "capabilities": capabilities(route)}}
        facts = self.facts(name)
        if facts is not None:  # LM Studio's word for it at the top, llmproxy's details below
            card["state"] = facts["state"]
            card["llmproxy"]["on_demand"] = facts
        return card

    def windows(self) -> list[tuple[str, int]]:
        """Each served name with its context length (Anthropic's list carries it too)."""
        return [(name, context_length(route)) for name, route in self.routes.items()]

    def _not_found(self, name: str) -> ModelNotFoundError:
        aliases = f"; aliases: {', '.join(self.aliases)}" if self.aliases else ""
        return ModelNotFoundError(f"The model {name!r} is not served here; known models: {', '.join(self.routes)}"
                                  f"{aliases}", param="model")


def context_length(route: Route) -> int:
    """The context the route's backend serves: as configured, else as its server reported it (learned once
    it answers, for a server that was down when the route was built), else the route's."""
    return route.backend.context_window() or route.context_window


def capabilities(route: Route) -> dict[str, Any]:
    """What the model takes: tools (every route: llmproxy renders them), a grammar (where its backend
    constrains output), embeddings (where its backend has an endpoint for them) and their length, where known."""
    backend = route.backend
    embeds = backend.capabilities.embeddings
    return {"tools": True, "grammar": backend.capabilities.grammar and route.grammar != "none", "embeddings": embeds,
            "embedding_dimensions": backend.embedding_dimensions() if embeds else None}
