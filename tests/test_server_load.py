"""The server under load and faults: admission control (running and queued limits, 429 with
Retry-After), queues that clients can leave, request ids, a hung backend that holds only its own
route's capacity, and the Prometheus metrics that show it."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

import httpx
import openai
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import MEMGPT_TOOLS, SERVER_THREAD, InstantBackend, fake_llamacpp, route, running

from llmproxy.backends.base import Capabilities, ProbeResult
from llmproxy.server import app as app_module
from llmproxy.server import endpoints
from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.server.config import RouteLimits

HI = [{"role": "user", "content": "hi"}]


class Held(InstantBackend):
    """Holds every generation until ``go`` is set (or for ``hold`` seconds); counts those started and
    the most at once."""

    def __init__(self, *, concurrent: bool = True, hold: float = 20) -> None:
        super().__init__()
        self.capabilities = Capabilities(concurrent=concurrent)
        self.hold = hold
        self.go = threading.Event()
        self.started = self.active = self.most = 0
        self._lock = threading.Lock()

    def stream(self, prompt, params):
        with self._lock:
            self.started += 1
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            self.go.wait(self.hold)
            yield from super().stream(prompt, params)
        finally:
            with self._lock:
                self.active -= 1


def wait_for(condition: Callable[[], bool], seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def chat(server, model: str, *, stream: bool = False, timeout: float = 30) -> httpx.Response:
    body = {"model": model, "messages": HI, "tools": MEMGPT_TOOLS, "stream": stream}
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=timeout)


class Background:
    """Requests sent from threads; ``results`` holds their responses (or exceptions) as they end."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.results: list[httpx.Response | Exception] = []

    def send(self, request: Callable[[], httpx.Response]) -> None:
        def run() -> None:
            try:
                self.results.append(request())
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                self.results.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def join(self) -> list[httpx.Response | Exception]:
        for thread in self.threads:
            thread.join(30)
        return self.results


# --- admission control -------------------------------------------------------------------------


def test_past_the_queue_requests_get_429_with_retry_after():
    """A one-at-a-time backend (like the embedded model), two places in its queue."""
    held = Held(concurrent=False)
    with running({"one": route(held, "one")}, limits={"one": RouteLimits(max_running=1, max_queue=2)}) as proxy:
        background = Background()
        for _ in range(3):
            background.send(lambda: chat(proxy, "one"))
        wait_for(lambda: held.started == 1)
        time.sleep(0.3)  # the other two are in the queue by now
        client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
        for stream in (False, True):
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="one", messages=HI, stream=stream)
            error = refused.value.body
            assert error["code"] == "queue_full" and error["type"] == "rate_limit_error"
            assert "'one' is busy: 1 requests running and 2 waiting" in error["message"]
            assert "max_queue 2" in error["message"]
            assert refused.value.response.headers["retry-after"] == "1"  # nothing has finished yet to go by
        held.go.set()
        results = background.join()
    assert [r.status_code for r in results] == [200, 200, 200]
    assert held.started == 3 and held.most == 1


def test_running_limit_of_a_concurrent_backend():
    held = Held()
    with running({"many": route(held, "many")}, limits={"many": RouteLimits(max_running=2, max_queue=0)}) as proxy:
        background = Background()
        for _ in range(2):
            background.send(lambda: chat(proxy, "many"))
        wait_for(lambda: held.started == 2)
        refused = chat(proxy, "many", stream=True)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
        held.go.set()
        assert [r.status_code for r in background.join()] == [200, 200]
    assert held.most == 2


def test_retry_after_follows_how_long_requests_run():
    slow = Held(concurrent=False, hold=1.5)
    with running({"slow": route(slow, "slow")}, limits={"slow": RouteLimits(max_running=1, max_queue=0)}) as proxy:
        assert chat(proxy, "slow").status_code == 200  # ran for 1.5 s
        background = Background()
        background.send(lambda: chat(proxy, "slow"))
        wait_for(lambda: slow.started == 2)
        refused = chat(proxy, "slow")
        background.join()
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"  # a place frees in about 1.5 s


def test_the_sdk_waits_retry_after_and_gets_its_answer():
    """OpenAI's client retries a 429 after Retry-After: a full queue costs a wait, not an error."""
    slow = InstantBackend(delay=0.01)
    with running({"slow": route(slow, "slow")}, limits={"slow": RouteLimits(max_running=1, max_queue=0)}) as proxy:
        client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=3)
        background = Background()
        for _ in range(3):
            background.send(lambda: client.chat.completions.with_raw_response.create(
                model="slow", messages=HI, tools=MEMGPT_TOOLS))
        results = background.join()
    assert all(not isinstance(result, Exception) for result in results), results
    assert sum(result.retries_taken for result in results) >= 2  # two were refused at first
    assert slow.finished == 3


def test_a_client_that_leaves_the_queue_frees_its_place_at_once():
    held = Held(concurrent=False)
    with running({"one": route(held, "one")}, limits={"one": RouteLimits(max_running=1, max_queue=1)}) as proxy:
        background = Background()
        background.send(lambda: chat(proxy, "one"))
        wait_for(lambda: held.started == 1)
        with pytest.raises(httpx.ReadTimeout):  # queued behind the first, then gone
            chat(proxy, "one", timeout=0.3)
        background.send(lambda: chat(proxy, "one"))  # takes the place it left
        time.sleep(0.3)
        assert len(background.results) == 0  # queued, not refused
        held.go.set()
        results = background.join()
    assert [r.status_code for r in results] == [200, 200]
    assert held.started == 2  # the one that left never ran


# --- request ids -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instant_server():
    with running({"instant": route(InstantBackend(), "instant")}) as proxy:
        yield proxy


def logged_ids(caplog) -> list[str]:
    return [re.search(r" id=(\S+) ", record.getMessage()).group(1)
            for record in caplog.records if record.name == "llmproxy.server" and " id=" in record.getMessage()]


def test_every_response_has_a_request_id_and_its_log_line_the_same(instant_server, caplog):
    client = OpenAI(base_url=instant_server.base_url, api_key="unused", max_retries=0)
    with caplog.at_level(logging.INFO, logger="llmproxy.server"):
        answer = client.chat.completions.with_raw_response.create(model="instant", messages=HI, tools=MEMGPT_TOOLS)
        streaming = client.chat.completions.with_streaming_response
        with streaming.create(model="instant", messages=HI, stream=True) as streamed:
            streamed_id = streamed.headers["x-request-id"]
            list(streamed.iter_lines())
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="instant", messages=[{"role": "wizard", "content": "hi"}])
    ids = [answer.headers["x-request-id"], streamed_id, refused.value.response.headers["x-request-id"]]
    assert all(re.fullmatch(r"req_[0-9a-f]{24}", id_) for id_ in ids) and len(set(ids)) == 3
    assert refused.value.request_id == ids[2]  # what the SDK shows for a failed request
    assert logged_ids(caplog) == ids
    for path in ("/models", "/nowhere"):
        assert re.fullmatch(r"req_[0-9a-f]{24}", httpx.get(instant_server.base_url + path).headers["x-request-id"])


@pytest.mark.parametrize("sent, echoed", [
    ("trace-42:7f/b=c+d@e.f_g", True),
    ("x" * 128, True),
    ("x" * 129, False),
    ("two words", False),
    ("forged\\nline", False),
    ("", False),
])
def test_a_clients_own_request_id_is_echoed_when_sane(instant_server, caplog, sent, echoed):
    body = {"model": "instant", "messages": HI}
    with caplog.at_level(logging.INFO, logger="llmproxy.server"):
        response = httpx.post(instant_server.base_url + "/chat/completions", json=body, headers={"X-Request-ID": sent})
    assert response.status_code == 200
    returned = response.headers["x-request-id"]
    assert (returned == sent) if echoed else re.fullmatch(r"req_[0-9a-f]{24}", returned)
    assert logged_ids(caplog) == [returned]


# --- isolation ---------------------------------------------------------------------------------


def test_a_hung_backend_holds_only_its_own_routes_capacity():
    """40 requests to a llama.cpp server that hangs, their clients gone after 3 s: each holds only its
    place in its own route (no thread: the backend is awaited on the event loop), and a healthy route
    still answers at once. Once their clients leave, their places and backend connections are let go
    at once, not when the backend would have answered (6 s)."""
    with fake_llamacpp() as llama:
        llama.mode, llama.hang_seconds = "hang", 6.0
        routes = {"hung": route(llama.backend(), "hung"), "healthy": route(InstantBackend(), "healthy")}
        with running(routes, limits={"hung": RouteLimits(max_running=40, max_queue=0)}) as proxy:
            background = Background()
            for _ in range(40):
                background.send(lambda: chat(proxy, "hung", timeout=3))
            wait_for(lambda: len(llama.bodies) == 40, 10)  # 40 threads wait on the backend
            client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0, timeout=10)
            started = time.monotonic()
            answer = client.chat.completions.create(model="healthy", messages=HI, tools=MEMGPT_TOOLS)
            streamed = list(client.chat.completions.create(model="healthy", messages=HI, stream=True))
            health = httpx.get(proxy.base_url.removesuffix("/v1") + "/health", timeout=10)
            assert time.monotonic() - started < 1.0
            assert queue_full(chat(proxy, "hung", timeout=5))  # its own capacity is full
            results = background.join()
            left = time.monotonic()
            metrics = proxy.base_url.removesuffix("/v1") + "/metrics"
            wait_for(lambda: 'llmproxy_running_requests{model="hung"} 0.0' in httpx.get(metrics).text, 2)
            assert time.monotonic() - left < 1.5  # the hung backend would answer 3 s later
    assert answer.choices[0].message.tool_calls[0].function.name == "send_message" and streamed
    assert health.status_code == 200
    assert all(isinstance(result, httpx.ReadTimeout) for result in results)


def test_streams_cut_while_their_backend_is_silent_let_go_of_it_at_once():
    """8 streams whose llama.cpp server goes silent mid-answer; their clients leave after the first
    chunks. Each request's place and upstream connection are released at once, and a stream nobody
    leaves is cut by read_timeout rather than held."""
    with fake_llamacpp() as llama:
        llama.mode, llama.hang_seconds = "stall", 4.0
        backend = LlamaCppBackend(llama.url, context_window=4096, read_timeout=1.0)
        with running({"stalls": route(backend, "stalls")}) as proxy:
            metrics = proxy.base_url.removesuffix("/v1") + "/metrics"

            def leave_after_first_chunks() -> None:
                with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=10,
                                  json={"model": "stalls", "messages": HI, "tools": MEMGPT_TOOLS,
                                        "stream": True}) as response:
                    next(response.iter_lines())

            background = Background()
            for _ in range(8):
                background.send(leave_after_first_chunks)
            background.join()
            left = time.monotonic()
            wait_for(lambda: 'llmproxy_running_requests{model="stalls"} 0.0' in httpx.get(metrics).text, 3)
            assert time.monotonic() - left < 1.0  # not when the backend speaks again (4 s)

            started = time.monotonic()
            stayed = chat(proxy, "stalls", stream=True, timeout=10)
            assert 0.9 < time.monotonic() - started < 3.0
            assert '"code":"backend_timeout"' in stayed.text and "read_timeout" in stayed.text


def queue_full(response: httpx.Response) -> bool:
    return response.status_code == 429 and response.json()["error"]["code"] == "queue_full"


class SilentProbe(InstantBackend):
    """Generates at once, but its health probe hangs."""

    def probe(self) -> ProbeResult:
        time.sleep(3)
        return ProbeResult(backend=self.name, url=None, up=True)


def test_health_does_not_wait_for_a_backend_that_does_not_answer(monkeypatch):
    monkeypatch.setattr(app_module, "HEALTH_TIMEOUT", 0.5)
    routes = {"silent": route(SilentProbe(), "silent"), "instant": route(InstantBackend(), "instant")}
    with running(routes, api_key="k") as proxy:
        started = time.monotonic()
        health = httpx.get(proxy.base_url.removesuffix("/v1") + "/health", headers={"Authorization": "Bearer k"})
        elapsed = time.monotonic() - started
    assert health.status_code == 503 and elapsed < 1.5
    models = health.json()["models"]
    assert models["silent"]["up"] is False and models["silent"]["detail"] == "no answer within 0.5 s"
    assert models["instant"]["up"] is True


# --- metrics -----------------------------------------------------------------------------------


def scrape(server, **headers: str) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    response = httpx.get(server.base_url.removesuffix("/v1") + "/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def test_metrics_count_requests_errors_time_and_queues():
    held = Held(concurrent=False)
    routes = {"instant": route(InstantBackend(), "instant"), "one": route(held, "one")}
    with running(routes, limits={"one": RouteLimits(max_running=1, max_queue=1)}) as proxy:
        client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
        client.chat.completions.create(model="instant", messages=HI, tools=MEMGPT_TOOLS)
        list(client.chat.completions.create(model="instant", messages=HI, stream=True))
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="no-such-model", messages=HI)
        background = Background()
        for _ in range(2):
            background.send(lambda: chat(proxy, "one"))
        wait_for(lambda: held.started == 1)
        time.sleep(0.3)  # the second waits in the queue
        assert queue_full(chat(proxy, "one"))
        during = scrape(proxy)
        held.go.set()
        background.join()
        after = scrape(proxy)

    def chat_metric(name: str, **labels: str) -> tuple[str, tuple]:
        return name, tuple(sorted({"endpoint": "chat.completions", **labels}.items()))

    assert during[("llmproxy_queue_depth", (("model", "one"),))] == 1
    assert during[("llmproxy_running_requests", (("model", "one"),))] == 1
    assert after[("llmproxy_queue_depth", (("model", "one"),))] == 0
    assert after[chat_metric("llmproxy_requests_total", model="instant", status="200")] == 2
    assert after[chat_metric("llmproxy_request_duration_seconds_count", model="instant")] == 2
    assert after[chat_metric("llmproxy_requests_total", model="-", status="404")] == 1  # not the name it sent
    assert after[chat_metric("llmproxy_errors_total", model="-", error="model_not_found")] == 1
    assert after[chat_metric("llmproxy_errors_total", model="one", error="queue_full")] == 1
    assert after[chat_metric("llmproxy_requests_total", model="one", status="200")] == 2
    assert not any("no-such-model" in str(key) for key in after)


def test_metrics_are_behind_the_api_key():
    with running({"instant": route(InstantBackend(), "instant")}, api_key="k") as proxy:
        refused = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        assert ("llmproxy_queue_depth", (("model", "instant"),)) in scrape(proxy, Authorization="Bearer k")


def test_a_request_with_large_schemas_is_drafted_off_the_event_loop(monkeypatch):
    """Building the grammar of a large schema takes a third of a second (1,000 properties): such a
    request is drafted in a worker thread, where the loop keeps serving others; a MemGPT-sized one is
    drafted on the loop, where drafting is cheapest."""
    drafted_in: dict[str, str] = {}
    real_draft = endpoints.draft

    def recording_draft(request, route, **options):
        drafted_in["large" if request.response_format else "memgpt"] = threading.current_thread().name
        return real_draft(request, route, **options)

    monkeypatch.setattr(endpoints, "draft", recording_draft)
    wide = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(400)}}
    with running({"fake": route(InstantBackend())}) as proxy:
        client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0, timeout=30)
        client.chat.completions.create(model="fake", messages=HI, tools=MEMGPT_TOOLS)
        with pytest.raises(openai.UnprocessableEntityError):  # the answer is a call, not the form
            client.chat.completions.create(model="fake", messages=HI, response_format={
                "type": "json_schema", "json_schema": {"name": "form", "schema": wide}})
    assert drafted_in == {"memgpt": SERVER_THREAD, "large": drafted_in["large"]}
    assert drafted_in["large"] != SERVER_THREAD
