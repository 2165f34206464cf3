"""Routes: wrapper aliases set grammar use, backends are shared, backend options reach the backend."""

from __future__ import annotations

import pytest

from llmproxy.errors import ConfigurationError
from llmproxy.route import build_route


def test_grammar_alias_and_explicit_setting():
    assert build_route(wrapper="chatml-grammar").grammar == "auto"
    assert build_route(wrapper="chatml").grammar == "auto"
    assert build_route(wrapper="chatml-grammar", grammar="none").grammar == "none"


def test_defaults_are_the_embedded_model_and_chatml():
    route = build_route()
    assert route.backend.name == "embedded" and route.wrapper.name == "chatml"
    assert route.context_window == 8192  # SmolLM2's own window, reported by the backend


def test_backends_are_shared_between_routes():
    assert build_route(wrapper="chatml").backend is build_route(wrapper="zephyr").backend


def test_backend_options_reach_the_backend():
    route = build_route(endpoint_type="vllm", endpoint="http://127.0.0.1:9", model="m", context_window=4096,
                        backend_options={"grammar_field": "guided_grammar", "read_timeout": 3.0})
    assert route.backend.grammar_key == "guided_grammar"
    assert route.context_window == 4096


def test_unknown_backend_option_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="does not take these options.*bogus"):
        build_route(endpoint_type="llamacpp", backend_options={"bogus": 1})


def test_unknown_backend_and_wrapper_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="unknown backend 'gpt5'.*llamacpp"):
        build_route(endpoint_type="gpt5")
    with pytest.raises(ConfigurationError, match="unknown wrapper"):
        build_route(wrapper="nope")
