"""The models loaded on demand in /metrics, read from the scheduler when scraped:

    llmproxy_model_loaded{model}               1 while loaded
    llmproxy_model_state{model, state}         1 for its state: unloaded, loading, loaded, unloading, failed
    llmproxy_model_memory_bytes{model}         what it takes in the budget (measured once it has loaded)
    llmproxy_model_loads_total{model}          loads
    llmproxy_model_load_seconds_total{model}   time spent loading
    llmproxy_model_unloads_total{model, reason}  ttl, evicted (to make room), requested, died, stopped
    llmproxy_model_waiting{model}              requests waiting for it to load
    llmproxy_model_swaps_total                 loads that waited for another model to unload first
    llmproxy_model_memory_budget_bytes         the budget (absent without one)
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmproxy.server.on_demand.scheduler import FAILED, LOADED, LOADING, UNLOADED, UNLOADING, Scheduler

STATES = (UNLOADED, LOADING, LOADED, UNLOADING, FAILED)


class OnDemandMetrics(Collector):
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        residents = list(self.scheduler.residents.values())
        loaded = GaugeMetricFamily("llmproxy_model_loaded", "1 while the model is loaded.", labels=["model"])
        state = GaugeMetricFamily("llmproxy_model_state", "1 for the model's state.", labels=["model", "state"])
        memory = GaugeMetricFamily("llmproxy_model_memory_bytes", "What the model takes in the memory budget.",
                                   labels=["model"])
        loads = CounterMetricFamily("llmproxy_model_loads", "Loads of the model.", labels=["model"])
        seconds = CounterMetricFamily("llmproxy_model_load_seconds", "Time spent loading the model.", labels=["model"])
        unloads = CounterMetricFamily("llmproxy_model_unloads", "Unloads of the model, by reason.",
                                      labels=["model", "reason"])
        waiting = GaugeMetricFamily("llmproxy_model_waiting", "Requests waiting for the model to load.",
                                    labels=["model"])
        for resident in residents:
            loaded.add_metric([resident.name], 1.0 if resident.state == LOADED else 0.0)
            for name in STATES:
                state.add_metric([resident.name, name], 1.0 if resident.state == name else 0.0)
            memory.add_metric([resident.name], resident.memory)
            loads.add_metric([resident.name], resident.loads)
            seconds.add_metric([resident.name], resident.load_seconds)
            for reason, count in resident.unloads.items():
                unloads.add_metric([resident.name, reason], count)
            waiting.add_metric([resident.name], len(resident.waiting))
        yield from (loaded, state, memory, loads, seconds, unloads, waiting)
        yield CounterMetricFamily("llmproxy_model_swaps", "Loads that waited for another model to unload first.",
                                  value=self.scheduler.swaps)
        if self.scheduler.budget is not None:
            yield GaugeMetricFamily("llmproxy_model_memory_budget_bytes", "Memory the models may take together.",
                                    value=self.scheduler.budget)
