"""A request chooses a settings preset with a ``preset`` field, on every generation endpoint: it takes the
place of the model's own preset, the model's settings still tune it, and the request's sampling fields
still win. An unknown one is a 400 in the endpoint's envelope that names the known presets."""

from __future__ import annotations

import dataclasses

import httpx
import pytest
from server_helpers import endpoint_envelope_problem, fake_llamacpp, route, running

HI = [{"role": "user", "content": "Hi"}]
# Each generation endpoint, with a body asking it something (the model's name, and the preset, added below).
BODIES = {
    "/chat/completions": {"messages": HI},
    "/completions": {"prompt": "Once upon a time"},
    "/responses": {"input": "Hi"},
    "/messages": {"messages": HI, "max_tokens": 50},
}


@pytest.fixture(scope="module")
def served():
    """A server whose model "m" runs on a fake llama.cpp with the preset "precise" and its own max_tokens."""
    with fake_llamacpp() as llama:
        model = dataclasses.replace(route(llama.backend(), "m", wrapper="chatml-json"), preset="precise",
                                    settings={"max_tokens": 77})
        with running({"m": model}) as server:
            yield server, llama


def ask(served, path: str, **fields) -> tuple[httpx.Response, dict]:
    """POST ``path`` with its body and ``fields``; the response and what the backend was sent (if anything)."""
    server, llama = served
    sent = len(llama.bodies)
    response = httpx.post(server.base_url + path, json={"model": "m", **BODIES[path], **fields}, timeout=30)
    return response, (llama.bodies[-1] if len(llama.bodies) > sent else {})


def test_without_a_preset_a_request_gets_the_models(served):
    response, body = ask(served, "/chat/completions")
    assert response.status_code == 200, response.text
    assert (body["top_p"], body["top_k"], body["repeat_penalty"], body["n_predict"]) == (0.1, 40, 1.18, 77)


@pytest.mark.parametrize("path", BODIES)
def test_a_requests_preset_takes_the_place_of_the_models(served, path):
    response, body = ask(served, path, preset="deterministic")
    assert response.status_code == 200, response.text
    assert (body["temperature"], body["top_k"], body["top_p"], body["repeat_penalty"]) == (0, 1, 1.0, 1.0)
    assert body["n_predict"] == BODIES[path].get("max_tokens", 77)  # the model's settings tune it, under the request


def test_the_requests_sampling_fields_win_over_its_preset(served):
    response, body = ask(served, "/chat/completions", preset="deterministic", temperature=0.9, top_p=0.8, seed=5,
                         max_tokens=12)
    assert response.status_code == 200, response.text
    assert (body["temperature"], body["top_p"], body["seed"], body["n_predict"]) == (0.9, 0.8, 5, 12)
    assert body["top_k"] == 1  # what the request does not set stays the preset's


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", BODIES)
def test_an_unknown_preset_is_a_400_naming_the_known_ones(served, path, stream):
    response, body = ask(served, path, preset="determinstic", stream=stream)
    assert response.status_code == 400 and body == {}
    assert endpoint_envelope_problem("/v1" + path, response.content) is None
    error = response.json()["error"]
    assert "unknown settings preset 'determinstic'; known presets: balanced, creative, " in error["message"]
    if not path.startswith("/messages"):
        assert error["param"] == "preset"


@pytest.mark.parametrize("preset", [3, "x" * 101])
def test_a_preset_that_is_no_name_is_a_400(served, preset):
    response, body = ask(served, "/chat/completions", preset=preset)
    assert response.status_code == 400 and body == {}
    assert response.json()["error"]["param"] == "preset"
