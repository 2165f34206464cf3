"""Grammars: the static files, validation with llama.cpp's own parser, and grammar-constrained generation
on the real SmolLM2. What call grammars admit is tested with each call syntax (tests/syntaxes/)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import llama_cpp
import pytest
from grammar_walk import accepts, sample

from llmproxy.backends.embedded import EmbeddedBackend
from llmproxy.errors import ConfigurationError, GrammarError
from llmproxy.grammar import grammar_names, load_grammar, schema_grammar, validate_grammar
from llmproxy.syntaxes.memgpt import MemGPTSyntax
from llmproxy.types import FunctionDefinition

MEMGPT = json.loads((Path(__file__).parent / "fixtures" / "memgpt_functions.json").read_text(encoding="utf-8"))


def check_memgpt_call(text: str, placement: str, choice: str = "required") -> None:
    """``text`` is one MemGPT call object whose arguments follow the called function's schema."""
    doc = json.loads(text)
    if placement == "top" and list(doc) == ["inner_thoughts"]:
        assert choice == "auto"
        return
    by_name = {f["name"]: f for f in MEMGPT}
    assert doc["function"] in by_name and choice in ("auto", "required", doc["function"])
    args = dict(doc["params"])
    if placement == "params":
        assert isinstance(args.pop("inner_thoughts"), str)
    jsonschema.validate(args, by_name[doc["function"]]["parameters"])


@pytest.mark.parametrize("name", ["json", "memgpt_function_calls"])
def test_static_grammar_is_accepted_by_llama_cpp(name):
    validate_grammar(load_grammar(name))


@pytest.mark.parametrize(
    "text,reason",
    [
        ('root ::= value\nobject ::= "{" "}"', "Undefined rule"),
        ('root ::= "{" root-x', "Undefined rule"),
        ('root ::= root "a" | "b"', "left-recursive"),
        ('item ::= "a"', "root"),
        ('root ::= "unterminated', "unterminated string"),
        ('root ::= "\\q"', "unknown escape"),
        ("root ::= send_message", "expecting newline"),  # '_' is not allowed in rule names
        ("", "empty"),
    ],
)
def test_broken_grammar_is_rejected(text, reason):
    with pytest.raises(GrammarError, match=reason):
        validate_grammar(text)


def test_validation_keeps_llama_cpp_quiet(capfd):
    with pytest.raises(GrammarError):
        validate_grammar("root ::= missing-rule")
    validate_grammar('root ::= "ok"')
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("name", ["json", "memgpt_function_calls"])
def test_static_grammar_samples(name):
    rng = random.Random(name)
    for _ in range(10):
        text = sample(load_grammar(name), rng)
        if name == "json":
            assert isinstance(json.loads(text), dict)
        else:
            check_memgpt_call(text, "params")


def test_unknown_grammar_name_lists_the_available_ones():
    assert {"json", "memgpt_function_calls"} <= set(grammar_names())
    with pytest.raises(GrammarError, match="memgpt_function_calls") as info:
        load_grammar("jsonn")
    assert isinstance(info.value, ConfigurationError)


def test_json_grammar():
    text = load_grammar("json")
    for doc in [{}, {"a": [1, -2.5e-3, True, None, {"b": "\u00e9 \"q\" \\"}]}, {"nested": {"x": []}}]:
        assert accepts(text, json.dumps(doc, indent=2, ensure_ascii=False))
    for bad in ["[1, 2]", '"text"', '{"a": 1,}', "{'a': 1}", '{"a": 01}', "{} {}"]:
        assert not accepts(text, bad)


@pytest.mark.parametrize("grammar", ["json file", "schema"])
def test_whitespace_that_lets_a_list_end_lets_an_element_begin(grammar):
    """Whitespace may not follow whitespace inside brackets: where it could ("[" ws, then the ws before
    "]" once the optional elements were skipped), a model that wandered in whitespace could only close
    the array or object it had opened, empty."""
    schema = {"type": "object", "required": ["floors"], "properties": {
        "floors": {"type": "array", "items": {"type": "integer"}},
        "size": {"type": "object", "properties": {"w": {"type": "integer"}}}}}
    text = load_grammar("json") if grammar == "json file" else schema_grammar(schema)
    for space in ["", " ", "\n  ", "\n  \n  ", "  ", "\n\t \n"]:
        ended = accepts(text, f'{{"floors": [{space}], "size": {{{space}}}}}')
        assert accepts(text, f'{{"floors": [{space}2], "size": {{{space}}}}}') == ended
        assert accepts(text, f'{{"floors": [{space}], "size": {{{space}"w": 1}}}}') == ended
    assert accepts(text, '{\n  "floors": [\n    2,\n    3\n  ],\n  "size": {\n    "w": 1\n  }\n}')


# --- constrained generation on the real model ------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    """The bundled SmolLM2 as the embedded backend loads it (the worker's one copy) and samples under a
    grammar, with the lock that serialises its use."""
    return EmbeddedBackend()._model


def prompt(user: str, placement: str) -> str:
    # The same system turn for every case, so llama-cpp-python reuses its evaluation.
    listing = "\n".join(f"- {f['name']}({', '.join(f['parameters']['properties'])})" for f in MEMGPT)
    shape = {
        "params": '{"function": NAME, "params": {"inner_thoughts": THOUGHTS, ...arguments}}',
        "top": '{"inner_thoughts": THOUGHTS, "function": NAME, "params": {...arguments}}',
        "none": '{"function": NAME, "params": {...arguments}}',
    }[placement]
    return (
        f"<|im_start|>system\nYou are an agent with memory. You answer with one JSON function call.\n"
        f"Functions:\n{listing}<|im_end|>\n<|im_start|>user\n{user}\nAnswer as {shape}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def memgpt_shape(placement: str, choice: str, primed: bool):
    """The MemGPT answer shape for the memory functions under ``choice`` (auto, required or a name)."""
    syntax = MemGPTSyntax(inner_thoughts=placement, prime="thoughts" if placement == "top" else "name")
    functions = [FunctionDefinition(**f) for f in MEMGPT]
    named = choice not in ("auto", "required")
    allowed = [choice] if named else [f.name for f in functions]
    call = "optional" if choice == "auto" else "required"
    return syntax.shape(call, functions, allowed, named=named, parallel=False, first_message=False, primed=primed)


@pytest.mark.model
def test_smollm2_constrained_generation_gives_valid_calls(smollm2):
    cases = [
        ("params", "required", True, "Hi! I'm Ana and I love green tea. Remember that."),
        ("top", "auto", True, "What did we talk about yesterday?"),
        ("none", "core_memory_replace", False, "Actually my name is Bea, not Ana."),
    ]
    # What the grammar guarantees, whatever a CPU's sampling does: every answer that ends is a valid
    # call (one cut at max_tokens is only a valid prefix). Over six generations some must end (four did
    # here; the thoughts-first answer runs to max_tokens at every seed tried).
    complete = 0
    for seed in (1, 2):
        for placement, choice, primed, user in cases:
            shape = memgpt_shape(placement, choice, primed)
            text = shape.syntax.grammar(shape).text
            with smollm2.lock:
                out = smollm2.llama.create_completion(
                    prompt(user, placement) + shape.prefix,
                    grammar=llama_cpp.LlamaGrammar.from_string(text, verbose=False), max_tokens=128,
                    temperature=0.7, seed=seed,
                )["choices"][0]
            if out["finish_reason"] == "stop":
                check_memgpt_call(shape.prefix + out["text"], placement, choice)
                complete += 1
    assert complete >= 1
