"""A captured request run again with another wrapper, syntax, grammar or settings.

It is read again from its captured body by its own endpoint (so another face's request is
translated as it was), handed to a variant of the route that answered it (``on_route``, as a
fallback is), and answered through that route's lane: admitted, drafted, planned, generated,
repaired and given its second chances by the same stages as any request, which are the pipeline
``llmproxy try`` runs. The run is a request of its own in the inspector's list, captured, marked as
a run of the original, and kept out of /metrics (no client asked for it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
from starlette.requests import Request

from llmproxy.errors import InvalidRequestError
from llmproxy.prompts import AUTO
from llmproxy.route import Route, named_wrapper, route_wrapper
from llmproxy.server.config import check_grammar
from llmproxy.server.disconnects import Cancelled
from llmproxy.server.endpoints import Served
from llmproxy.server.inspector.recent import Entry, Recent
from llmproxy.server.inspector.steps import Steps
from llmproxy.server.lanes import Lane
from llmproxy.server.request_ids import request_id
from llmproxy.server.request_log import RequestLog
from llmproxy.server.responses import answer
from llmproxy.settings import to_generation_params

CHANGES = ("wrapper", "syntax", "grammar", "settings")


def read_changes(fields: dict[str, Any]) -> dict[str, Any]:
    """What a re-run changes: ``wrapper``, ``syntax``, ``grammar`` (names) and ``settings`` (an object);
    empty values change nothing."""
    unknown = sorted(set(fields) - set(CHANGES))
    if unknown:
        raise InvalidRequestError(f"invalid request: a re-run changes {', '.join(CHANGES)}, not {unknown[0]!r}",
                                  param=unknown[0])
    changes = {key: value for key, value in fields.items() if value not in (None, "", {})}
    for key in ("wrapper", "syntax", "grammar"):
        if not isinstance(changes.get(key, ""), str):
            raise InvalidRequestError(f"invalid request: {key} must be a name", param=key)
    if not isinstance(changes.get("settings", {}), dict):
        raise InvalidRequestError("invalid request: settings must be an object, e.g. {\"temperature\": 0}",
                                  param="settings")
    return changes


def variant(route: Route, changes: dict[str, Any]) -> Route:
    """``route`` with ``changes``: a named wrapper (its alias's grammar setting with it), or ``syntax``
    alone for the model's own template (wrapper "auto"); a grammar; settings over the route's. May ask
    the backend for its chat template, so it runs off the event loop."""
    wrapper, syntax, grammar = changes.get("wrapper"), changes.get("syntax"), changes.get("grammar")
    check_grammar(grammar)
    updates: dict[str, Any] = {}
    if wrapper is not None or syntax is not None:
        named = named_wrapper(wrapper or AUTO, syntax)
        resolved = route_wrapper(route.backend, wrapper or AUTO, syntax, named)
        updates["wrapper"] = resolved.wrapper
        updates["grammar"] = grammar or (resolved.grammar_mode() if resolved.grammar is not None else route.grammar)
    elif grammar is not None:
        updates["grammar"] = grammar
    if changes.get("settings"):
        updates["settings"] = {**route.settings, **changes["settings"]}
    changed = replace(route, **updates)
    to_generation_params(changed.base_settings)  # bad settings fail here, as in a config file
    return changed


async def rerun(original: Entry, changes: dict[str, Any], served: Served, lane_of: Callable[[Route], Lane],
                recent: Recent, request: Request) -> Entry:
    """Run ``original`` again with ``changes``; the run's own entry, whatever its outcome."""
    steps, route = original.log.steps, original.log.route
    if steps is None or not steps.whole or route is None:
        raise InvalidRequestError("This request was not captured whole, so it cannot be run again; start the "
                                  "server with --capture.")
    if not getattr(steps.kind, "rerunnable", True):
        raise InvalidRequestError(f"A request to {original.log.endpoint} is not run again here: it renders no "
                                  "prompt to try with another wrapper, syntax or grammar.")
    changed = await anyio.to_thread.run_sync(variant, route, changes)
    generation = steps.kind.read(json.loads(steps.request), served).on_route(changed)
    done: list[Entry] = []
    log = RequestLog("rerun", request_id(request.scope), lambda ended: done.append(recent.record(ended)),
                     steps=Steps(recent.field_limit))
    log.steps.kind, log.steps.request, log.steps.whole = steps.kind, steps.request, True
    log.steps.rerun_of, log.steps.changes = original.seq, changes
    log.serving(changed, False)
    try:
        log.answered(await answer(request, lane_of(changed), generation, log))
    except Cancelled:
        log.disconnected()
    except Exception as exc:  # noqa: BLE001 - the run's failure is its result, shown on the page
        log.failed(exc)
    log.emit()
    return done[0]
