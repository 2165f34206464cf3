"""A settings preset reaches every backend in that backend's own words: each HTTP backend's fake reads the
request body back by its protocol (fakes.py), and the embedded backend's arguments are llama-cpp-python's.
A sampler a backend has no counterpart for is left out of its requests, and a warning names it."""

from __future__ import annotations

import inspect
import logging

import pytest
from conftest import EVERY_SAMPLER
from llama_cpp import Llama

from llmproxy import get_chat_completion
from llmproxy.backends import backend_class
from llmproxy.backends.base import SAMPLERS
from llmproxy.backends.embedded import EmbeddedBackend
from llmproxy.settings import resolve_settings, to_generation_params

from .test_contract import HTTP_BACKENDS, protocol_fake


@pytest.mark.parametrize("name", HTTP_BACKENDS)
def test_a_preset_reaches_each_backend_in_its_own_names(name, fake, write_preset, caplog):
    server = protocol_fake(name, fake)
    server.serve_completion("Hello there.")
    if backend_class(name).capabilities.tokenizer:
        server.serve_tokenizer()
    with caplog.at_level(logging.WARNING, logger="llmproxy.settings"):
        response = get_chat_completion([{"role": "user", "content": "Hi"}], endpoint_type=name, endpoint=server.url,
                                       model=server.options.get("model"), wrapper="chatml-json", grammar="none",
                                       preset="every_sampler", retries=0)
    assert response.choices[0].message.content == "Hello there."
    (body,) = server.completion_requests()
    taken = set(server.sampler_fields.values())
    assert server.samplers(body) == {key: value for key, value in EVERY_SAMPLER.items() if key in taken}
    sent = server.sent(body)
    assert (sent.temperature, sent.seed) == (0.42, 11)
    # What the protocol has no field for is not sent under llmproxy's name either.
    keys = set(body) | set(body.get("options") or {})
    assert not keys & (set(SAMPLERS) - set(server.sampler_fields))
    untaken = [key for key in SAMPLERS if key not in taken]
    warnings = [record.getMessage() for record in caplog.records if record.name == "llmproxy.settings"]
    if not untaken:
        assert warnings == []
        return
    (warning,) = warnings
    assert f"the {name} backend has no counterpart for the sampler settings {', '.join(untaken)} " \
           "(from preset 'every_sampler'): left out of its requests" in warning


def test_the_embedded_backend_gets_a_preset_in_llama_cpp_pythons_names(write_preset, caplog):
    with caplog.at_level(logging.WARNING, logger="llmproxy.settings"):
        params = to_generation_params(resolve_settings("embedded", preset="every_sampler"))
    arguments = EmbeddedBackend()._arguments(params)  # builds the call; loads no model
    assert set(arguments) <= set(inspect.signature(Llama.create_completion).parameters)
    assert {key: arguments[key] for key in arguments if key not in ("max_tokens", "stop")} == {
        "temperature": 0.42, "seed": 11, "top_k": 7, "min_p": 0.07, "typical_p": 0.9, "repeat_penalty": 1.3,
        "presence_penalty": 0.4, "frequency_penalty": 0.6, "mirostat_mode": 2, "mirostat_tau": 6.5,
        "mirostat_eta": 0.25, "top_p": 0.95}  # top_p: the backend's default, which the preset leaves alone
    assert caplog.records == []  # it takes every one
