"""User wrappers and grammars: found on the search path ($LLMPROXY_PATH, then ~/.config/llmproxy, then
the built-in ones), shadowing built-ins of the same name, and listed with where they came from."""

from __future__ import annotations

import pytest
from cli_helpers import invoke

from llmproxy import grammar, prompts
from llmproxy._data import PATH_ENV, user_config_dir
from llmproxy.errors import ConfigurationError
from llmproxy.grammar import grammar_names, load_grammar
from llmproxy.prompts import load_wrapper, wrapper_specs
from llmproxy.types import FunctionDefinition

PIRATE_TOML = '''description = "ChatML, spoken like a pirate (a user's own wrapper)."
template = "pirate"
stop = ["<|im_end|>"]
reserved = ["<|im_start|>", "<|im_end|>"]
text_prefix = "\\n"

[answer]
syntax = "memgpt"
call = "required"
inner_thoughts = "none"
prime = "open"
'''
PIRATE_JINJA = '''{% import "_common.jinja" as common %}
<|im_start|>system
Arr! {{ system }}
{{ common.instructions(functions, inner_thoughts, call) }}<|im_end|>
{% for m in messages %}
<|im_start|>{{ m.role }}
{{ m.text }}<|im_end|>
{% endfor %}
<|im_start|>assistant
'''


@pytest.fixture
def fresh_search_path():
    """Loaded wrappers and grammars are forgotten before and after, so the test sees its own folders."""
    prompts.clear_caches()
    grammar.grammar_files.cache_clear()
    yield
    prompts.clear_caches()
    grammar.grammar_files.cache_clear()


def write(folder, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def test_a_wrapper_in_a_folder_on_llmproxy_path_is_found(tmp_path, monkeypatch, fresh_search_path):
    write(tmp_path / "mine" / "wrappers", "pirate.toml", PIRATE_TOML)
    write(tmp_path / "mine" / "wrappers", "pirate.jinja", PIRATE_JINJA)  # it imports a built-in template
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "mine"))
    wrapper = load_wrapper("pirate").wrapper
    shape = wrapper.shape("required", [FunctionDefinition(name="dig")])
    prompt = wrapper.render([], shape).prompt
    assert prompt.startswith("<|im_start|>system\nArr!") and "dig:" in prompt and prompt.endswith("assistant\n{")
    assert {spec.name: spec.origin for spec in wrapper_specs()}["pirate"] == tmp_path / "mine" / "wrappers" / "pirate.toml"


def test_a_user_wrapper_shadows_the_built_in_one(tmp_path, monkeypatch, fresh_search_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # the suite's own config folder stays empty
    write(user_config_dir() / "wrappers", "chatml.toml", PIRATE_TOML.replace('"pirate"', '"chatml"'))
    spec = load_wrapper("chatml").wrapper.spec
    assert spec.origin == tmp_path / "llmproxy" / "wrappers" / "chatml.toml"
    assert "pirate" in spec.description
    assert load_wrapper("chatml-noforce").wrapper.spec.origin.parent != spec.origin.parent  # others built in


def test_llmproxy_path_comes_before_the_user_config_folder(tmp_path, monkeypatch, fresh_search_path):
    write(tmp_path / "first" / "grammars", "yesno.gbnf", 'root ::= "yes" | "no"\n')
    write(tmp_path / "second" / "grammars", "yesno.gbnf", 'root ::= "no"\n')
    write(tmp_path / "second" / "grammars", "digits.gbnf", "root ::= [0-9]+\n")
    monkeypatch.setenv(PATH_ENV, f"{tmp_path / 'first'}:{tmp_path / 'second'}")
    assert {"yesno", "digits", "json", "memgpt_function_calls"} <= set(grammar_names())
    assert load_grammar("yesno") == 'root ::= "yes" | "no"\n'
    assert load_grammar("digits") == "root ::= [0-9]+\n"


def test_a_broken_user_wrapper_names_its_file(tmp_path, monkeypatch, fresh_search_path):
    write(tmp_path / "wrappers", "broken.toml", 'description = "x"\n[answer]\nsyntax = "smoke-signals"\n')
    monkeypatch.setenv(PATH_ENV, str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"broken\.toml: unknown call syntax 'smoke-signals'"):
        load_wrapper("chatml")


def test_wrappers_command_says_where_a_user_wrapper_comes_from(tmp_path, monkeypatch, fresh_search_path):
    write(tmp_path / "wrappers", "pirate.toml", PIRATE_TOML)
    write(tmp_path / "wrappers", "pirate.jinja", PIRATE_JINJA)
    monkeypatch.setenv(PATH_ENV, str(tmp_path))
    listing = invoke("wrappers")
    assert listing.exit_code == 0, listing.output
    assert f"from {tmp_path / 'wrappers' / 'pirate.toml'}" in listing.stdout
    shown = invoke("wrappers", "show", "pirate")
    assert str(tmp_path / "wrappers" / "pirate.jinja") in shown.stdout and "Arr!" in shown.stdout
