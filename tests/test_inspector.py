"""The inspector at /inspect over HTTP: who may see it, what it keeps (bodies only with capture, within
its bounds), every step of a request, its live feed, and a captured request run again."""

from __future__ import annotations

import gc
import json


import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from inspector_helpers import ASK, HERMES_CALL, TRAILING_COMMA, scripted_route
from pool_helpers import pool_of, slot_servers
from server_helpers import running

from llmproxy.backends.base import GenerationParams
from llmproxy.cli import app as cli
from llmproxy.server.config import load_config
from llmproxy.server.inspector.recent import Recent
from llmproxy.server.inspector.steps import Steps
from llmproxy.server.request_log import RequestLog

KEY = "sekrit-key"
SECRET = "my bank PIN is 4921"  # user data that must never show without capture
PATHS = ["/inspect", "/inspect/static/inspect.js", "/inspect/static/inspect.css", "/inspect/api/overview",
         "/inspect/api/requests", "/inspect/api/requests/1", "/inspect/api/events"]


def root(server) -> str:
    return server.base_url.removesuffix("/v1")


def ask(server, *, key: str | None = None, secret: str = SECRET, **fields) -> httpx.Response:
    body = {**ASK, "messages": [{"role": "user", "content": f"What is 2 + 3? ({secret})"}], **fields}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.post(server.base_url + "/chat/completions", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response


def get(server, path: str, **headers: str) -> httpx.Response:
    if path.endswith("/events"):  # a stream: its status and first bytes are enough
        with httpx.stream("GET", root(server) + path, headers=headers, timeout=10) as response:
            response.read() if response.status_code != 200 else next(response.iter_bytes())
            return response
    return httpx.get(root(server) + path, headers=headers, timeout=10)


@pytest.fixture(scope="module")
def keyed():
    """A capturing server with a key, holding one request (the scripted second chance and repair)."""
    _, route = scripted_route()
    with running({"m": route}, api_key=KEY, capture=True) as server:
        ask(server, key=KEY)
        yield server


@pytest.fixture(scope="module")
def open_server():
    """A server with no key and no capture, holding one request."""
    _, route = scripted_route()
    with running({"m": route}) as server:
        ask(server)
        yield server


# --- who may see it ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_without_the_key_the_page_and_its_data_are_refused(keyed, path):
    response = get(keyed, path)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert get(keyed, path, Authorization=f"Bearer {KEY}").status_code == 200


def test_rerun_without_the_key_is_refused_and_runs_nothing(keyed):
    before = len(httpx.get(root(keyed) + "/inspect/api/requests", headers={"x-api-key": KEY}).json())
    response = httpx.post(root(keyed) + "/inspect/api/requests/1/rerun", json={"wrapper": "hermes"})
    assert response.status_code == 401
    assert len(httpx.get(root(keyed) + "/inspect/api/requests", headers={"x-api-key": KEY}).json()) == before


def test_a_browser_signs_in_once_with_the_key_in_the_address(keyed):
    wrong = httpx.get(root(keyed) + "/inspect?key=guess")
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    signed = httpx.get(root(keyed) + f"/inspect?key={KEY}")
    assert signed.status_code == 303 and signed.headers["location"] == "/inspect"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/inspect" in cookie
    with httpx.Client(base_url=root(keyed), cookies=signed.cookies) as browser:
        assert browser.get("/inspect/api/requests").status_code == 200
        assert browser.get("/v1/models").status_code == 401  # the cookie is the inspector's alone


@pytest.mark.parametrize("path", PATHS)
def test_another_sites_page_is_refused_even_with_the_key(keyed, path):
    response = get(keyed, path, Origin="https://evil.example", Authorization=f"Bearer {KEY}")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "origin_not_allowed"
    own = f"http://127.0.0.1:{keyed.port}"
    assert get(keyed, path, Origin=own, Authorization=f"Bearer {KEY}").status_code == 200


@pytest.mark.parametrize("path", PATHS)
def test_a_foreign_host_name_is_refused(keyed, path):
    response = get(keyed, path, Host="rebound.example", Authorization=f"Bearer {KEY}")
    assert response.status_code == 421
    assert response.json()["error"]["code"] == "host_not_allowed"


def test_the_page_loads_nothing_from_elsewhere(open_server):
    response = httpx.get(root(open_server) + "/inspect")
    assert response.status_code == 200 and "text/html" in response.headers["content-type"]
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert "http" not in response.text.replace("http-equiv", "")  # no CDN, no absolute URL


# --- what is kept -------------------------------------------------------------------------------


def test_without_capture_no_body_appears_anywhere(open_server):
    listed = httpx.get(root(open_server) + "/inspect/api/requests")
    detail = httpx.get(root(open_server) + "/inspect/api/requests/1")
    with httpx.stream("GET", root(open_server) + "/inspect/api/events") as events:
        first = b""
        for chunk in events.iter_bytes():
            first += chunk
            if b"id: 1" in first:
                break
    for body in (listed.text, detail.text, first.decode()):
        assert SECRET not in body and "fly_to_moon" not in body and "root ::=" not in body
    view = detail.json()
    assert view["steps"] is None and view["captured"] is False and view["can_rerun"] is False
    assert view["attempts"] == 2 and view["repairs"] == ["drop_trailing_comma"]  # the metadata is there
    rerun = httpx.post(root(open_server) + "/inspect/api/requests/1/rerun", json={"wrapper": "hermes"})
    assert rerun.status_code == 400 and "--capture" in rerun.json()["error"]["message"]


def test_with_capture_every_step_is_kept(keyed):
    view = httpx.get(root(keyed) + "/inspect/api/requests/1", headers={"x-api-key": KEY}).json()
    steps = view["steps"]
    assert SECRET in steps["request"]
    first, second = steps["attempts"]
    assert "<|im_start|>" in steps["markers"] and "<|im_start|>user" in first["prompt"]
    assert first["grammar"].startswith("root ::=") and "<|im_end|>" in first["stops"]
    assert "fly_to_moon" in first["raw"] and "fly_to_moon" in first["rejected"]
    # The second chance: the checker's message is in the prompt the model got next.
    assert first["rejected"] in second["prompt"]
    assert second["raw"] == TRAILING_COMMA and second["rejected"] is None
    assert view["repairs"] == ["drop_trailing_comma"]
    response = json.loads(steps["response"])
    assert json.loads(response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}


def test_a_streamed_request_is_captured_with_its_final_response():
    _, route = scripted_route(grammar="none")  # no call streams before it is checked: a second chance
    with running({"m": route}, capture=True) as server:
        with httpx.stream("POST", server.base_url + "/chat/completions", json={**ASK, "stream": True}) as response:
            assert b"[DONE]" in response.read()
        view = httpx.get(root(server) + "/inspect/api/requests/1").json()
    assert view["stream"] is True and len(view["steps"]["attempts"]) == 2
    assert view["steps"]["attempts"][1]["grammar"] is None and '"add"' in view["steps"]["response"]


def test_a_failure_is_captured_with_the_message_sent():
    _, route = scripted_route()  # its grammar lets the unknown call stream out: no second chance
    with running({"m": route}, capture=True) as server:
        with httpx.stream("POST", server.base_url + "/chat/completions", json={**ASK, "stream": True}) as response:
            response.read()
        view = httpx.get(root(server) + "/inspect/api/requests/1").json()
    assert view["status"] == 422 and view["error"] == "invalid_function_call"
    assert "fly_to_moon" in view["steps"]["failure"] and view["steps"]["response"] is None


def _log(steps: Steps, text: str) -> RequestLog:
    log = RequestLog("chat.completions", "req_x", steps=steps)
    steps.received(None, {"messages": [{"role": "user", "content": text}]})
    steps.planned(text, GenerationParams(grammar=text), ())
    steps.output(text)
    return log


def test_the_buffer_stays_within_its_byte_bound_under_large_requests():
    recent = Recent(capture=True, max_entries=1000, max_bytes=1024 * 1024)
    for index in range(300):  # 300 requests of ~200 KB of bodies each, through a 1 MiB buffer
        recent.record(_log(recent.steps(), "x" * (50_000 + index)))
        assert recent.bytes <= recent.max_bytes
        assert recent.bytes == sum(entry.held for entry in recent.entries)
    assert 1 < len(recent.entries) < 10 and recent.entries[-1].seq == 300
    assert recent.get(300) is recent.entries[-1] and recent.get(1) is None


def test_a_text_over_the_field_limit_is_cut_and_a_request_over_the_bound_keeps_its_metadata():
    recent = Recent(capture=True, max_bytes=64 * 1024)
    steps = recent.steps()
    entry = recent.record(_log(steps, "é" * 100_000))  # non-ASCII counts 4 bytes a character
    assert len(steps.attempts[0].prompt) < 100_000 and "more characters" in steps.attempts[0].prompt
    assert entry.log.steps is None and entry.dropped > recent.max_bytes and recent.bytes == 0


def test_without_capture_a_request_keeps_no_steps():
    recent = Recent(max_entries=3)
    assert recent.steps() is None
    for _ in range(5):
        recent.record(RequestLog("completions", "req_x", steps=recent.steps()))
    assert [entry.seq for entry in recent.entries] == [3, 4, 5] and recent.bytes == 0


# --- live feed, overview, re-run -----------------------------------------------------------------


def _events(server, count: int, **headers: str) -> list[dict]:
    found = []
    with httpx.stream("GET", root(server) + "/inspect/api/events", headers=headers, timeout=10) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                found.append(json.loads(line.removeprefix("data: ")))
                if len(found) == count:
                    return found
    return found


def test_the_feed_sends_requests_as_they_end_and_resumes_after_the_last_seen():
    _, route = scripted_route()
    with running({"m": route}) as server:
        sent = ask(server)
        (first,) = _events(server, 1)
        assert first["id"] == sent.headers["x-request-id"] and first["status"] == 200 and first["attempts"] == 2
        ask(server)
        (resumed,) = _events(server, 1, **{"Last-Event-ID": "1"})
        assert resumed["seq"] == 2
        (restarted,) = _events(server, 1, **{"Last-Event-ID": "99"})  # a page that saw a server before this one
        assert restarted["seq"] == 1


def test_the_overview_shows_each_model_with_the_numbers_of_metrics(keyed):
    overview = httpx.get(root(keyed) + "/inspect/api/overview", headers={"x-api-key": KEY}).json()
    (model,) = overview["models"]
    assert model["model"] == "m" and model["backend"] == "scripted" and model["wrapper"] == "chatml-json"
    assert model["syntax"] == "json" and model["up"] is True and model["running"] == 0
    metrics = httpx.get(root(keyed) + "/metrics", headers={"x-api-key": KEY}).text
    requests = model["counts"]["requests"]
    assert f'llmproxy_requests_total{{endpoint="chat.completions",model="m",status="200"}} {requests}' in metrics
    assert f'llmproxy_retries_total{{model="m"}} {model["counts"]["retries"]}' in metrics
    assert overview["capture"] is True and "hermes" in overview["choices"]["wrappers"]


def test_a_captured_request_runs_again_with_another_wrapper(keyed):
    headers = {"x-api-key": KEY}
    response = httpx.post(root(keyed) + "/inspect/api/requests/1/rerun", json={"wrapper": "hermes"},
                          headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["rerun_of"] == 1 and run["wrapper"] == "hermes" and run["status"] == 200
    assert run["changes"] == {"wrapper": "hermes"} and run["endpoint"] == "rerun"
    (attempt,) = run["steps"]["attempts"]
    assert "<tools>" in attempt["prompt"] and attempt["raw"] == HERMES_CALL
    assert '\\"a\\": 20' in run["steps"]["response"]
    assert httpx.get(root(keyed) + f"/inspect/api/requests/{run['seq']}", headers=headers).json()["rerun_of"] == 1
    metrics = httpx.get(root(keyed) + "/metrics", headers=headers).text
    assert 'endpoint="rerun"' not in metrics  # no client asked for it
    assert ask(keyed, key=KEY).json()["llmproxy"]["wrapper"] == "chatml-json"  # the run changed a copy of the route


@pytest.mark.parametrize("changes, status, says", [
    ({"wrapper": "no-such-wrapper"}, 400, "unknown wrapper"),
    ({"grammar": "no-such-grammar"}, 400, "unknown grammar"),
    ({"settings": {"temperature": "hot"}}, 400, "temperature"),
    ({"colour": "blue"}, 400, "colour"),
])
def test_a_rerun_with_bad_changes_says_what_is_wrong(keyed, changes, status, says):
    response = httpx.post(root(keyed) + "/inspect/api/requests/1/rerun", json=changes, headers={"x-api-key": KEY})
    assert response.status_code == status and says in response.json()["error"]["message"]


def test_a_rerun_body_must_be_json(keyed):
    response = httpx.post(root(keyed) + "/inspect/api/requests/1/rerun", content='{"wrapper": "hermes"}',
                          headers={"x-api-key": KEY, "Content-Type": "text/plain"})
    assert response.status_code == 415


def test_a_request_no_longer_kept_is_a_404(keyed):
    response = httpx.get(root(keyed) + "/inspect/api/requests/9999", headers={"x-api-key": KEY})
    assert response.status_code == 404 and "no longer kept" in response.json()["error"]["message"]


def test_serve_captures_with_the_flag_or_the_config_key(monkeypatch, tmp_path):
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app_, **options: served.append(app_))
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    model = ["--backend", "llamacpp", "--endpoint", "http://127.0.0.1:9", "--context-window", "4096"]
    path = tmp_path / "server.toml"
    path.write_text('[server]\ncapture = true\n\n[models.m]\nbackend = "llamacpp"\nendpoint = "http://127.0.0.1:9"\n'
                    'context_window = 4096\n', encoding="utf-8")
    try:
        for arguments in (model, [*model, "--capture"], ["--config", str(path)]):
            result = CliRunner().invoke(cli, ["serve", *arguments])
            assert result.exit_code == 0, result.output
    finally:
        gc.unfreeze()  # the test process goes on; only a server keeps everything it loaded
    captures = []
    for app in served:
        with TestClient(app, base_url="http://localhost") as client:
            captures.append(client.get("/inspect/api/overview").json()["capture"])
    assert captures == [False, True, True]
    assert load_config(path).server.capture is True


def test_the_overview_shows_each_member_of_a_pool():
    with slot_servers(2) as servers:
        routes, pools = pool_of(servers)
        with running(routes, pools=pools) as server:
            (model,) = httpx.get(root(server) + "/inspect/api/overview", timeout=30).json()["models"]
    assert [(member["name"], member["state"], member["endpoint"]) for member in model["members"]] == [
        ("m0", "up", servers[0].url), ("m1", "up", servers[1].url)]
