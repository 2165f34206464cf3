"""What the inspector page is sent, as plain JSON-ready dicts: each model's overview, a request's
summary (the live list) and its every step (one request).

The overview's counts are read from the app's Prometheus registry, so the page shows the very
numbers /metrics exports; the page itself turns their change over the last minutes into rates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from llmproxy.backends.base import ProbeResult
from llmproxy.route import Route
from llmproxy.server.admission import Admission
from llmproxy.server.inspector.recent import Entry
from llmproxy.server.metrics import Metrics

# Samples of /metrics summed by model for the overview: the page's name -> the sample's.
COUNTS = {"requests": "llmproxy_requests_total", "errors": "llmproxy_errors_total",
          "retries": "llmproxy_retries_total", "fallbacks": "llmproxy_fallbacks_total",
          "ttfb_sum": "llmproxy_time_to_first_token_seconds_sum",
          "ttfb_count": "llmproxy_time_to_first_token_seconds_count"}


def summary(entry: Entry) -> dict[str, Any]:
    """One request in the live list: metadata only, whatever was captured."""
    log = entry.log
    route = log.route
    steps = log.steps
    return {
        "seq": entry.seq, "id": log.request_id, "endpoint": log.endpoint, "ended": entry.ended,
        "model": route.name if route else None, "backend": route.backend.name if route else None,
        "wrapper": route.wrapper.name if route else None, "stream": log.stream, "status": log.status,
        "error": log.error, "seconds": log.seconds, "first_token_seconds": log.first_token_seconds,
        "prompt_tokens": log.prompt_tokens, "completion_tokens": log.completion_tokens, "attempts": log.attempts,
        "repairs": log.repair_names, "grammar": log.grammar,
        "fallbacks": [{"model": model, "error": error} for model, error in log.fallbacks],
        "model_wait_seconds": log.model_wait,  # waiting for its model to load (llmproxy.server.on_demand)
        "captured": steps is not None, "dropped_bytes": entry.dropped,
        "rerun_of": steps.rerun_of if steps is not None else None,
    }


def detail(entry: Entry) -> dict[str, Any]:
    """One request and, where it was captured, every step of it."""
    steps = entry.log.steps
    view = summary(entry)
    view["steps"] = steps.view() if steps is not None else None
    view["changes"] = steps.changes if steps is not None else None
    view["can_rerun"] = (steps is not None and steps.kind is not None and steps.whole
                         and getattr(steps.kind, "rerunnable", True))
    return view


def event(entry: Entry) -> bytes:
    """An entry as a server-sent event; its id lets a reconnecting page resume after it."""
    return b"id: %d\nevent: request\ndata: %s\n\n" % (entry.seq, orjson.dumps(summary(entry)))


def route_view(route: Route, admission: Admission, fallbacks: Sequence[str], counts: Mapping[str, float],
               probe: ProbeResult, members: list[dict[str, Any]] | None,
               on_demand: dict[str, Any] | None = None) -> dict[str, Any]:
    """One served model: where it sends (each member of a pool: ``members``, as /health reports them),
    how it renders, its health, load and counts; for a model loaded on demand, its state, memory and a
    started server's last lines (``on_demand``: llmproxy.server.on_demand)."""
    spec = route.wrapper.spec
    return {
        "model": route.name, "backend": route.backend.name, "endpoint": getattr(route.backend, "endpoint", None),
        "wrapper": route.wrapper.name, "syntax": spec.answer.get("syntax") if spec.syntax is not None else "text",
        "grammar": route.grammar, "decide": route.decide, "context_window": route.context_window,
        "retries": route.retries, "fallbacks": list(fallbacks),
        "up": probe.up, "health": probe.detail, "members": members,
        "running": admission.running, "queued": admission.waiting, "max_running": admission.max_running,
        "max_queue": admission.max_queue, "counts": dict(counts), "on_demand": on_demand,
    }


def counts_by_model(metrics: Metrics) -> dict[str, dict[str, float]]:
    """The overview's samples of /metrics, summed by their ``model`` label."""
    wanted = {sample: name for name, sample in COUNTS.items()}
    found: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(COUNTS, 0.0))
    for metric in metrics.registry.collect():
        for sample in metric.samples:
            name = wanted.get(sample.name)
            if name is not None and "model" in sample.labels:
                found[sample.labels["model"]][name] += sample.value
    return found
