"""Prometheus metrics, served at /metrics (behind the API key when there is one).

    llmproxy_requests_total{endpoint, model, status}           generation requests, as they ended
    llmproxy_errors_total{endpoint, model, error}              those that failed, by error code (or type)
    llmproxy_request_duration_seconds{endpoint, model}         how long each took, to its last byte
    llmproxy_time_to_first_token_seconds{endpoint, model}      until the backend's first piece of answer
    llmproxy_tokens_total{model, kind}                         prompt and completion tokens of answers
    llmproxy_grammar_requests_total{model, grammar}            what constrained each generation (its label)
    llmproxy_repairs_total{model, repair}                      repairs made to answers, by kind
    llmproxy_retries_total{model}                              second chances given to unusable answers
    llmproxy_fallbacks_total{model, error}                     models that could not take a request, and why
    llmproxy_escalations_total{model, to}                      unusable answers asked again of escalate_to
    llmproxy_queue_depth{model}, llmproxy_running_requests{model}  each backend lane and pool, when scraped
    llmproxy_member_up{model, member}                          a pool member in (1) or cooling down (0)
    llmproxy_member_in_flight{model, member}                   requests llmproxy has on it
    llmproxy_member_load{model, member}                        the load its backend last reported
    llmproxy_member_requests_total{model, member}              requests it was chosen for
    llmproxy_member_failures_total{model, member}              times it failed (and was taken out)
    llmproxy_member_time_to_first_token_seconds{model, member} until its first piece of answer
    llmproxy_stored_responses, llmproxy_stored_response_bytes  the Responses API's store, when scraped

Each request is counted from its log line's record (llmproxy.server.request_log), so the two always
agree. ``model`` is a served model's name, or ``-`` when the request named none that is served: a
label must not take any value a client sends. Each app has its own registry, so several apps can
live in one process.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmproxy.server.lanes import Lane
from llmproxy.server.pools.pool import Pool
from llmproxy.server.request_log import RequestLog
from llmproxy.server.response_store import ResponseStore

CONTENT_TYPE = CONTENT_TYPE_LATEST
# From a cached short answer to a long generation on a slow machine.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """One app's metrics: ``record`` each request as it ends; ``exposition`` is what /metrics serves."""

    def __init__(self, lanes: Iterable[Lane], store: ResponseStore | None = None, pools: Iterable[Pool] = ()) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("llmproxy_requests", "Generation requests, by endpoint, model and HTTP status.",
                                ["endpoint", "model", "status"], registry=self.registry)
        self.errors = Counter("llmproxy_errors", "Generation requests that failed, by endpoint, model and error.",
                              ["endpoint", "model", "error"], registry=self.registry)
        self.duration = Histogram("llmproxy_request_duration_seconds", "Generation request time, to the last byte.",
                                  ["endpoint", "model"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.first_token = Histogram("llmproxy_time_to_first_token_seconds",
                                     "Time until the backend's first piece of the answer.", ["endpoint", "model"],
                                     buckets=DURATION_BUCKETS, registry=self.registry)
        self.tokens = Counter("llmproxy_tokens", "Tokens of answered requests, by model and kind (prompt, completion).",
                              ["model", "kind"], registry=self.registry)
        self.grammars = Counter("llmproxy_grammar_requests", "Generations by what constrained them.",
                                ["model", "grammar"], registry=self.registry)
        self.repairs = Counter("llmproxy_repairs", "Repairs made to answers, by kind.", ["model", "repair"],
                               registry=self.registry)
        self.retries = Counter("llmproxy_retries", "Second chances given to unusable answers.", ["model"],
                               registry=self.registry)
        self.fallbacks = Counter("llmproxy_fallbacks", "Models that could not take a request, by error.",
                                 ["model", "error"], registry=self.registry)
        self.escalations = Counter("llmproxy_escalations", "Unusable answers asked again of the model's escalate_to.",
                                   ["model", "to"], registry=self.registry)
        self.member_first_token = Histogram("llmproxy_member_time_to_first_token_seconds",
                                            "Time until a pool member's first piece of the answer.", ["model", "member"],
                                            buckets=DURATION_BUCKETS, registry=self.registry)
        # Read live: a reloaded config file changes the lanes and pools in place.
        self.registry.register(_Lanes(lanes, pools))
        self.registry.register(_Members(pools))
        if store is not None:
            self.registry.register(_Store(store))

    def record(self, log: RequestLog) -> None:
        model = log.route.name if log.route else "-"
        self.requests.labels(log.endpoint, model, str(log.status)).inc()
        if log.error:
            self.errors.labels(log.endpoint, model, log.error).inc()
        self.duration.labels(log.endpoint, model).observe(log.seconds)
        if log.first_token_seconds is not None:
            self.first_token.labels(log.endpoint, model).observe(log.first_token_seconds)
        if log.prompt_tokens or log.completion_tokens:
            self.tokens.labels(model, "prompt").inc(log.prompt_tokens)
            self.tokens.labels(model, "completion").inc(log.completion_tokens)
        if log.grammar is not None:
            self.grammars.labels(model, log.grammar).inc()
        for repair in log.repair_names:
            self.repairs.labels(model, repair).inc()
        if log.attempts > 1:
            self.retries.labels(model).inc(log.attempts - 1)
        for tried, error in log.fallbacks:
            self.fallbacks.labels(tried, error).inc()
        if log.escalated is not None:
            self.escalations.labels(*log.escalated).inc()
        if log.member is not None and log.first_token_seconds is not None:
            self.member_first_token.labels(model, log.member).observe(log.first_token_seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Lanes(Collector):
    """Each lane's and pool's queue and running requests, read when scraped (nothing to keep up to date)."""

    def __init__(self, lanes: Iterable[Lane], pools: Iterable[Pool]) -> None:
        self.lanes = lanes
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily("llmproxy_queue_depth", "Requests waiting for a place to run.", labels=["model"])
        running = GaugeMetricFamily("llmproxy_running_requests", "Requests running.", labels=["model"])
        for admission in [*(lane.admission for lane in self.lanes), *(pool.admission for pool in self.pools)]:
            waiting.add_metric([admission.name], admission.waiting)
            running.add_metric([admission.name], admission.running)
        yield waiting
        yield running


class _Members(Collector):
    """Each pool member's state and counts, read when scraped."""

    def __init__(self, pools: Iterable[Pool]) -> None:
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "member"]
        up = GaugeMetricFamily("llmproxy_member_up", "Pool members in (1) or cooling down after a failure (0).",
                               labels=labels)
        in_flight = GaugeMetricFamily("llmproxy_member_in_flight", "Requests llmproxy has on each pool member.",
                                      labels=labels)
        load = GaugeMetricFamily("llmproxy_member_load", "Requests each pool member's backend last reported "
                                 "(running and waiting).", labels=labels)
        requests = CounterMetricFamily("llmproxy_member_requests", "Requests each pool member was chosen for.",
                                       labels=labels)
        failures = CounterMetricFamily("llmproxy_member_failures", "Times each pool member failed.", labels=labels)
        for pool in self.pools:
            for member in pool.members:
                names = [pool.name, member.name]
                up.add_metric(names, 1 if member.health.up else 0)
                in_flight.add_metric(names, member.in_flight)
                if member.reported is not None:
                    load.add_metric(names, member.reported.total)
                requests.add_metric(names, member.requests)
                failures.add_metric(names, member.failures)
        yield from (up, in_flight, load, requests, failures)


class _Store(Collector):
    """How many Responses API turns are stored, and their bytes, read when scraped."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("llmproxy_stored_responses", "Responses API turns kept for previous_response_id.",
                                value=len(self.store))
        yield GaugeMetricFamily("llmproxy_stored_response_bytes", "Bytes those stored turns hold.",
                                value=self.store.bytes)
