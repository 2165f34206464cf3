"""Layered settings: the backend class's defaults -> user file -> call settings (reference 5.3)."""

from __future__ import annotations

import json

import pytest

from llmproxy.backends import BACKEND_NAMES, backend_class
from llmproxy.errors import ConfigurationError
from llmproxy.settings import (
    USER_SETTINGS_ENV,
    backend_defaults,
    deep_merge,
    resolve_settings,
    to_generation_params,
    user_settings_path,
)



@pytest.fixture(autouse=True)
def no_user_file(tmp_path, monkeypatch):
    monkeypatch.setenv(USER_SETTINGS_ENV, str(tmp_path / "absent.json"))


def write_user_file(tmp_path, monkeypatch, content):
    path = tmp_path / "settings.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    monkeypatch.setenv(USER_SETTINGS_ENV, str(path))
    return path


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_defaults_are_the_backend_class_own_and_carry_no_stop_strings(backend):
    defaults = backend_defaults(backend)
    assert defaults == dict(backend_class(backend).default_settings)
    assert "stop" not in defaults  # stop strings end a prompt format: they are the wrapper's
    assert 0 < defaults["max_tokens"] <= 4096
    assert 0 < defaults["temperature"] <= 1
    params = to_generation_params(defaults)
    assert params.stop == () and params.grammar is None


def test_an_unregistered_backend_has_no_defaults():
    assert backend_defaults("scripted") == {}


def test_backend_specific_defaults_pass_through_as_extra():
    assert to_generation_params(resolve_settings("llamacpp")).extra == {"cache_prompt": True}


def test_call_settings_win_and_lists_replace():
    settings = resolve_settings("vllm", {"max_tokens": 50, "stop": ["\n\n"], "top_k": 5})
    assert (settings["max_tokens"], settings["stop"], settings["top_k"]) == (50, ["\n\n"], 5)


def test_defaults_are_never_mutated():
    call = {"options": {"num_thread": [1]}}
    first = resolve_settings("llamacpp", call)
    first["options"]["num_thread"].append(2)
    first["cache_prompt"] = False
    to_generation_params(resolve_settings("llamacpp", {"prompt": "leak?"}))
    assert call == {"options": {"num_thread": [1]}}
    # Pinned values, not the class attribute: a mutated class attribute would compare equal to itself.
    assert resolve_settings("llamacpp") == {"max_tokens": 1024, "temperature": 0.7, "top_p": 0.95,
                                            "cache_prompt": True}


def test_deep_merge_is_deep_and_pure():
    base = {"a": {"b": 1, "c": [1]}, "d": 1}
    override = {"a": {"c": [2], "e": 3}}
    assert deep_merge(base, override) == {"a": {"b": 1, "c": [2], "e": 3}, "d": 1}
    assert base == {"a": {"b": 1, "c": [1]}, "d": 1} and override == {"a": {"c": [2], "e": 3}}


def test_user_file_shared_keys_then_backend_section(tmp_path, monkeypatch):
    write_user_file(tmp_path, monkeypatch, {"temperature": 0.1, "options": {"num_thread": 4},
                                            "ollama": {"temperature": 0.3, "options": {"num_gpu": 1}},
                                            "vllm": {"top_k": 9}})
    ollama = resolve_settings("ollama", {"seed": 1})
    assert ollama["temperature"] == 0.3 and ollama["options"] == {"num_thread": 4, "num_gpu": 1}
    assert ollama["seed"] == 1 and "vllm" not in ollama and "top_k" not in ollama
    assert resolve_settings("llamacpp")["temperature"] == 0.1


def test_user_file_location(monkeypatch, tmp_path):
    monkeypatch.setenv(USER_SETTINGS_ENV, str(tmp_path / "x.json"))
    assert user_settings_path() == tmp_path / "x.json"


@pytest.mark.parametrize("content,words", [("{not json", "not valid JSON"), ("[1, 2]", "must hold a JSON object"),
                                           ({"ollama": [1]}, "section 'ollama' must be an object of settings")])
def test_bad_user_file(tmp_path, monkeypatch, content, words):
    path = write_user_file(tmp_path, monkeypatch, content)
    with pytest.raises(ConfigurationError, match=words) as info:
        resolve_settings("ollama")
    assert str(path) in str(info.value) or "section" in words


def test_generation_params_split():
    params = to_generation_params({"max_tokens": 5, "stop": "\n", "temperature": 0, "top_p": 1, "seed": 3,
                                   "grammar": "root ::= x", "mirostat": 2, "top_k": None, "dry_multiplier": 0.8})
    assert (params.max_tokens, params.stop, params.temperature, params.top_p, params.seed, params.grammar) == (
        5, ("\n",), 0, 1, 3, "root ::= x")
    assert params.samplers == {"mirostat": 2}  # a sampler set to None is not set
    assert params.extra == {"dry_multiplier": 0.8}


@pytest.mark.parametrize("settings,words", [
    ({"max_tokens": "100"}, "'max_tokens' must be an integer"), ({"max_tokens": 0}, "at least 1"),
    ({"max_tokens": True}, "'max_tokens'"), ({"temperature": "hot"}, "'temperature' must be a number"),
    ({"stop": [1]}, "'stop' must be a string or a list"), ({"seed": 1.5}, "'seed'"), ({"grammar": 5}, "'grammar'"),
    ({"top_k": 1.5}, "'top_k' must be an integer"), ({"min_p": "low"}, "'min_p' must be a number"),
    ({"repeat_penalty": True}, "'repeat_penalty' must be a number"),
    ({"mirostat": 3}, r"'mirostat' must be 0 \(off\), 1 or 2"),
])
def test_wrong_types_are_configuration_errors(settings, words):
    with pytest.raises(ConfigurationError, match=words):
        to_generation_params(settings)


def test_the_user_settings_file_follows_xdg_config_home_like_wrappers_and_grammars(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMPROXY_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_settings_path() == tmp_path / "llmproxy" / "settings.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_settings_path() == tmp_path / "home" / ".config" / "llmproxy" / "settings.json"
