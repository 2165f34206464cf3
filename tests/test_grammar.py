"""Grammars: every grammar is parsed by llama.cpp itself; what a grammar admits is checked with
llama.cpp's own grammar sampler (random walks through the grammar, and accept/reject of given texts)
against the JSON schemas with jsonschema, and a few constrained generations run on the real SmolLM2."""

from __future__ import annotations

import ctypes
import json
import random
from pathlib import Path

import jsonschema
import llama_cpp
import numpy as np
import pytest

from llmproxy import grammar
from llmproxy.errors import ConfigurationError
from llmproxy.grammar import GrammarError, build_call_grammar, grammar_names, load_grammar, validate_grammar

MEMGPT = json.loads((Path(__file__).parent / "fixtures" / "memgpt_functions.json").read_text(encoding="utf-8"))


def fn(name: str, properties: dict, required=(), **extra) -> dict:
    schema = {"type": "object", "properties": properties, "required": list(required), **extra}
    return {"name": name, "description": f"test function {name}", "parameters": schema}


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


SHAPES = {
    "memgpt": MEMGPT,
    "kitchen": [
        fn(
            "kitchen.sink",
            {
                "text": {"type": "string"},
                "delta": {"type": "integer"},
                "count": {"type": "integer", "minimum": 0},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
                "nothing": {"type": "null"},
                "mode": {"enum": ["fast", "slow", 3, None]},
                "version": {"const": "v1"},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
                "point": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "label": {"type": "string"}},
                    "required": ["x", "y"],
                    "additionalProperties": False,
                },
                "maybe": {"type": ["string", "null"]},
                "either": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}]},
                "one": {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]},
            },
            required=["text", "delta", "count", "mode", "version", "tags", "point"],
            additionalProperties=False,
        ),
        fn("echo", {"text": {"type": "string"}}, required=["text"]),
    ],
    "optional": [
        fn("leading_optional", {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}, "d": {"type": "string"}}, required=["c"]),
        fn("all_optional", {"a": {"type": "integer"}, "b": {"type": "boolean"}}),
        {"name": "no_params", "description": "takes nothing"},
        {"name": "untyped", "parameters": {"properties": {"q": {"type": "string"}}, "required": ["q"]}},
        fn("empty_props", {}, additionalProperties=False),
    ],
    "refs": [
        {
            "name": "tree",
            "parameters": {
                "type": "object",
                "$defs": {
                    "node": {
                        "type": "object",
                        "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                        "required": ["value"],
                    }
                },
                "properties": {"root": {"$ref": "#/$defs/node"}},
                "required": ["root"],
            },
        },
        {
            "name": "merged",
            "parameters": {
                "type": "object",
                "$defs": {"person": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
                "properties": {
                    "who": {"allOf": [{"$ref": "#/$defs/person"}, {"properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}]}
                },
                "required": ["who"],
            },
        },
    ],
    "names": [
        fn(
            "ns.tool-v2_beta",
            {"naïve key": {"type": "string"}, 'quote"back\\slash': {"enum": ["日本", 'a"b', "c\\d", "tab\there", "🎉"]}},
            required=["naïve key", 'quote"back\\slash'],
        ),
        fn("ns_tool-v2.beta", {"x": {"type": "integer"}}, required=["x"]),  # same rule name once sanitised
        fn("deep", {"x": nested(14)}, required=["x"]),  # just inside the depth limit
    ],
    "maps": [
        fn(
            "settings",
            {"values": {"type": "object", "additionalProperties": {"type": "integer"}}, "anything": {}, "list": {"type": "array"}, "loose": {"type": "object"}},
            required=["values", "anything"],
        ),
    ],
    "many": [fn(f"tool_{i}", {"q": {"type": "string"}, "n": {"type": "integer"}, "k": {"enum": [f"v{i}", "w"]}}, required=["q"]) for i in range(50)],
}

PREFIXES = {
    "params": ["", " {", '\n{\n  "function":', '\n{\n  "function": "{name}",'],
    "none": ["", "\n{\n  ", '{"function":', '{ "function" : "{name}" ,'],
    "top": ["", "\n{", '\n{\n  "inner_thoughts":'],
}


def cases():
    for shape, functions in SHAPES.items():
        for placement, prefixes in PREFIXES.items():
            for choice in ("auto", "required", functions[-1]["name"]):
                for prefix in prefixes:
                    name = choice if choice not in ("auto", "required") else functions[0]["name"]
                    yield shape, placement, choice, prefix.replace("{name}", name)


# --- llama.cpp's grammar sampler as a matcher and a random generator -------------------------


def tokenize(text: str) -> list[int]:
    data = text.encode()
    buf = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(grammar._vocab(), data, len(data), buf, len(buf), False, False)
    assert n >= 0
    return list(buf[:n])


def piece(token: int) -> bytes:
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(grammar._vocab(), token, buf, 64, 0, False)
    return buf.raw[:n]


class Walker:
    """A llama.cpp grammar sampler; accepting a token it forbids would abort the process, so always ask first."""

    def __init__(self, text: str) -> None:
        validate_grammar(text)
        self.sampler = llama_cpp.llama_sampler_init_grammar(grammar._vocab(), text.encode(), b"root")

    def allowed(self, tokens: list[int]) -> list[int]:
        data = np.zeros(len(tokens), dtype=[("id", np.intc), ("logit", np.single), ("p", np.single)])
        data["id"] = tokens
        array = llama_cpp.llama_token_data_array(data.ctypes.data_as(llama_cpp.llama_token_data_p), len(tokens), -1, False)
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        return data["id"][np.isfinite(data["logit"])].tolist()

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.sampler, token)

    def __del__(self) -> None:
        llama_cpp.llama_sampler_free(self.sampler)


def eos() -> int:
    return llama_cpp.llama_vocab_eos(grammar._vocab())


def accepts(text_grammar: str, text: str) -> bool:
    walker = Walker(text_grammar)
    for token in tokenize(text):
        if not walker.allowed([token]):
            return False
        walker.accept(token)
    return bool(walker.allowed([eos()]))


_ALPHABET = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "日", "🎉", '":', "true", "false", "null", ' "']
CLOSERS = {b'"', b"}", b"]"}


def sample(text_grammar: str, rng: random.Random, literals: str = "", limit: int = 3000) -> str:
    """A random text the grammar admits: walk it over single characters (those of ``literals`` too)
    and a few words, pushing towards closing quotes and brackets as the text grows so the walk ends."""
    pieces = {t: piece(t) for s in {*_ALPHABET, *literals} for t in tokenize(s)}
    candidates, end = [*pieces, eos()], eos()
    walker, out = Walker(text_grammar), b""
    for step in range(limit):
        ok = walker.allowed(candidates)
        if end in ok and (len(ok) == 1 or rng.random() < 0.5):
            return out.decode()
        ok = [t for t in ok if t != end]
        pressure = 40 if step > 150 else 3
        token = rng.choices(ok, [pressure if pieces[t] in CLOSERS else 1 for t in ok])[0]
        walker.accept(token)
        out += pieces[token]
    raise AssertionError(f"random walk did not finish: {out[:200]!r}")


# --- the call object a grammar output must be ------------------------------------------------


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
    return dict(pairs)


def check_call(text: str, functions: list[dict], placement: str, choice: str) -> None:
    doc = json.loads(text, object_pairs_hook=_no_duplicates)
    if placement == "top" and list(doc) == ["inner_thoughts"]:
        assert choice == "auto" or not functions, "a thoughts-only answer needs tool choice auto"
        assert isinstance(doc["inner_thoughts"], str)
        return
    assert list(doc) == (["inner_thoughts", "function", "params"] if placement == "top" else ["function", "params"])
    by_name = {f["name"]: f for f in functions}
    assert doc["function"] in by_name
    assert choice in ("auto", "required") or doc["function"] == choice
    args = dict(doc["params"])
    if placement == "params":
        assert list(args)[0] == "inner_thoughts" and isinstance(args.pop("inner_thoughts"), str)
    schema = by_name[doc["function"]].get("parameters") or {"type": "object", "properties": {}}
    jsonschema.validate(args, schema)
    declared = list(schema.get("properties", {}))
    assert [k for k in declared if k in args] == list(args), "only declared keys, in schema order"


# --- every grammar parses --------------------------------------------------------------------


@pytest.mark.parametrize("shape,placement,choice,prefix", list(cases()))
def test_generated_grammar_is_accepted_by_llama_cpp(shape, placement, choice, prefix):
    validate_grammar(build_call_grammar(SHAPES[shape], inner_thoughts=placement, choice=choice, prefix=prefix))


@pytest.mark.parametrize("name", ["json", "memgpt_function_calls"])
def test_static_grammar_is_accepted_by_llama_cpp(name):
    validate_grammar(load_grammar(name))


@pytest.mark.parametrize(
    "text,reason",
    [
        ('root ::= value\nobject ::= "{" "}"', "Undefined rule"),
        ('root ::= "{" root-x', "Undefined rule"),
        ('root ::= root "a" | "b"', "left recursion"),
        ('item ::= "a"', "root"),
        ('root ::= "unterminated', "unexpected end"),
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


# --- what the grammars admit -----------------------------------------------------------------


def sampling_cases():
    for i, (shape, functions) in enumerate(SHAPES.items()):
        for j, placement in enumerate(PREFIXES):
            for k, choice in enumerate(("auto", "required", functions[-1]["name"])):
                prefixes = PREFIXES[placement]
                prefix = prefixes[(i + j + k) % len(prefixes)]
                forced = choice if choice not in ("auto", "required") else functions[0]["name"]
                yield shape, placement, choice, prefix.replace("{name}", forced)


@pytest.mark.parametrize("shape,placement,choice,prefix", list(sampling_cases()))
def test_sampled_calls_follow_the_schema(shape, placement, choice, prefix):
    functions = SHAPES[shape]
    text = build_call_grammar(functions, inner_thoughts=placement, choice=choice, prefix=prefix)
    rng = random.Random(f"{shape}/{placement}/{choice}/{prefix}")
    seen = set()
    for _ in range(12):
        doc = prefix + sample(text, rng, json.dumps(functions, ensure_ascii=False))
        check_call(doc, functions, placement, choice)
        seen.add(json.loads(doc).get("function"))
    if choice == "required" and len(functions) > 1 and not prefix.rstrip().endswith(","):
        assert len(seen) > 1, "the walk should reach more than one function"


@pytest.mark.parametrize("name", ["json", "memgpt_function_calls"])
def test_static_grammar_samples(name):
    rng = random.Random(name)
    for _ in range(10):
        text = sample(load_grammar(name), rng)
        if name == "json":
            assert isinstance(json.loads(text), dict)
        else:
            check_call(text, MEMGPT, "params", "required")


def call(function: str, **params) -> str:
    return json.dumps({"function": function, "params": params}, ensure_ascii=False)


APPEND = {"inner_thoughts": "remember", "name": "human", "content": "likes tea", "request_heartbeat": True}
MEMGPT_ACCEPTED = [
    call("core_memory_append", **APPEND),
    json.dumps({"function": "core_memory_append", "params": APPEND}, indent=2),
    call("conversation_search", inner_thoughts="", query="tea", request_heartbeat=False),
    call("conversation_search", inner_thoughts="", query="tea", page=2, request_heartbeat=False),
    call("send_message", inner_thoughts="greet", message='line\nbreak "quoted" \\ 日本 🎉'),
    '\n{"function":"pause_heartbeats","params":{"inner_thoughts":"\\u00e9","minutes":15}}',
]
MEMGPT_REJECTED = {
    "enum value not allowed": call("core_memory_append", **{**APPEND, "name": "user"}),
    "required key missing": call("core_memory_append", **{k: v for k, v in APPEND.items() if k != "request_heartbeat"}),
    "extra key": call("send_message", inner_thoughts="x", message="hi", mood="happy"),
    "unknown function": call("send_messages", inner_thoughts="x", message="hi"),
    "arguments of another function": call("send_message", inner_thoughts="x", minutes=5),
    "keys out of order": json.dumps({"params": {"inner_thoughts": "x", "message": "hi"}, "function": "send_message"}),
    "argument order": call("core_memory_append", inner_thoughts="x", content="c", name="human", request_heartbeat=True),
    "no inner thoughts": call("send_message", message="hi"),
    "string for boolean": call("core_memory_append", **{**APPEND, "request_heartbeat": "yes"}),
    "fraction for integer": call("conversation_search", inner_thoughts="", query="q", page=1.5, request_heartbeat=False),
    "trailing text": call("send_message", inner_thoughts="x", message="hi") + " thanks",
    "long whitespace": call("send_message", inner_thoughts="x", message="hi").replace(":", ":\n" + " " * 21, 1),
    "blank lines": call("send_message", inner_thoughts="x", message="hi").replace(":", ":\n\n", 1),
    "raw newline in string": call("send_message", inner_thoughts="x", message="hi").replace("hi", "h\ni"),
    "single quotes": "{'function': 'send_message', 'params': {'inner_thoughts': 'x', 'message': 'hi'}}",
    "array at the top": "[" + call("send_message", inner_thoughts="x", message="hi") + "]",
}


@pytest.fixture(params=["generated", "static"])
def memgpt_grammar(request):
    if request.param == "static":
        return load_grammar("memgpt_function_calls")
    return build_call_grammar(MEMGPT, inner_thoughts="params")


@pytest.mark.parametrize("text", MEMGPT_ACCEPTED)
def test_memgpt_grammar_accepts_valid_calls(memgpt_grammar, text):
    check_call(text, MEMGPT, "params", "required")
    assert accepts(memgpt_grammar, text)


@pytest.mark.parametrize("text", MEMGPT_REJECTED.values(), ids=MEMGPT_REJECTED.keys())
def test_memgpt_grammar_rejects_invalid_calls(memgpt_grammar, text):
    assert not accepts(memgpt_grammar, text)


KITCHEN_OK = {
    "text": "t", "delta": -12, "count": 0, "ratio": -1.5e3, "flag": False, "nothing": None, "mode": 3,
    "version": "v1", "tags": ["a", "c"], "point": {"x": 1, "y": 2.5, "label": "p"}, "maybe": None,
    "either": {"id": "x"}, "one": [1, -2],
}


@pytest.mark.parametrize(
    "change,ok",
    [
        ({}, True),
        ({"mode": None, "maybe": "s", "either": -3, "one": True}, True),
        ({"count": -1}, False),  # minimum 0
        ({"mode": "medium"}, False),
        ({"mode": "3"}, False),
        ({"version": "v2"}, False),
        ({"tags": []}, False),  # minItems 1
        ({"tags": ["a", "b", "c", "a"]}, False),  # maxItems 3
        ({"tags": ["d"]}, False),
        ({"point": {"x": 1, "y": 2, "z": 3}}, False),  # additionalProperties false
        ({"point": {"y": 2, "x": 1}}, False),  # schema order
        ({"point": {"x": 1}}, False),
        ({"either": "id"}, False),
        ({"one": [1, 2, 3]}, False),
        ({"nothing": 0}, False),
        ({"ratio": "1"}, False),
        ({"flag": None}, False),
    ],
)
def test_kitchen_sink_values(change, ok):
    text = build_call_grammar(SHAPES["kitchen"], inner_thoughts="none")
    doc = call("kitchen.sink", **{**KITCHEN_OK, **change})
    assert accepts(text, doc) is ok
    try:
        check_call(doc, SHAPES["kitchen"], "none", "required")
        assert ok
    except (jsonschema.ValidationError, AssertionError):
        assert not ok


def test_optional_properties_may_be_left_out_in_any_combination():
    text = build_call_grammar(SHAPES["optional"], inner_thoughts="none")
    assert accepts(text, call("leading_optional", c=True))
    assert accepts(text, call("leading_optional", a="x", c=True))
    assert accepts(text, call("leading_optional", b=1, c=False, d="y"))
    assert not accepts(text, call("leading_optional", a="x", d="y"))  # c is required
    assert not accepts(text, '{"function": "leading_optional", "params": {, "c": true}}')
    assert accepts(text, call("all_optional"))
    assert accepts(text, call("all_optional", b=True))
    assert accepts(text, call("no_params"))
    assert not accepts(text, call("empty_props", a=1))


def test_thoughts_only_answer_needs_tool_choice_auto():
    thoughts = '{"inner_thoughts": "nothing to do"}'
    assert accepts(build_call_grammar(MEMGPT, inner_thoughts="top", choice="auto"), thoughts)
    assert not accepts(build_call_grammar(MEMGPT, inner_thoughts="top", choice="required"), thoughts)
    top_call = '{"inner_thoughts": "hi", "function": "send_message", "params": {"message": "hello"}}'
    assert accepts(build_call_grammar(MEMGPT, inner_thoughts="top", choice="auto"), top_call)
    assert accepts(build_call_grammar([], inner_thoughts="top", choice="auto"), thoughts)


def test_named_choice_admits_only_that_function():
    text = build_call_grammar(MEMGPT, inner_thoughts="none", choice="archival_memory_search")
    assert accepts(text, call("archival_memory_search", query="q", request_heartbeat=True))
    assert not accepts(text, call("conversation_search", query="q", request_heartbeat=True))


def test_grammar_covers_exactly_the_text_after_the_prefix():
    prefix = '\n{\n  "function": "send_message",'
    text = build_call_grammar(MEMGPT, inner_thoughts="params", prefix=prefix)
    assert accepts(text, ' "params": {"inner_thoughts": "hm", "message": "hi"}}')
    assert not accepts(text, call("send_message", inner_thoughts="hm", message="hi"))
    assert not accepts(text, ' "params": {"inner_thoughts": "hm", "minutes": 3}}')
    thoughts = build_call_grammar(MEMGPT, inner_thoughts="top", prefix='{"inner_thoughts":')
    assert accepts(thoughts, ' "hm", "function": "send_message", "params": {"message": "hi"}}')


def test_a_schema_property_named_inner_thoughts_appears_once():
    functions = [fn("f", {"inner_thoughts": {"type": "string"}, "x": {"type": "integer"}}, required=["x"])]
    text = build_call_grammar(functions, inner_thoughts="params")
    assert accepts(text, call("f", inner_thoughts="t", x=1))
    assert not accepts(text, '{"function": "f", "params": {"inner_thoughts": "t", "inner_thoughts": "u", "x": 1}}')


def test_literals_are_escaped():
    text = build_call_grammar(SHAPES["names"], inner_thoughts="none")
    for value in ["日本", 'a"b', "c\\d", "tab\there", "🎉"]:
        assert accepts(text, call("ns.tool-v2_beta", **{"naïve key": "k", 'quote"back\\slash': value}))
    assert not accepts(text, call("ns.tool-v2_beta", **{"naïve key": "k", 'quote"back\\slash': "日"}))
    assert accepts(text, call("ns_tool-v2.beta", x=-4))


def test_tools_entries_are_accepted_too():
    tools = [{"type": "function", "function": f} for f in MEMGPT]
    assert build_call_grammar(tools, inner_thoughts="none") == build_call_grammar(MEMGPT, inner_thoughts="none")


def test_generation_is_cached_per_schema_set_and_options():
    first = build_call_grammar(MEMGPT, inner_thoughts="params")
    assert build_call_grammar(json.loads(json.dumps(MEMGPT)), inner_thoughts="params") is first
    assert build_call_grammar(MEMGPT, inner_thoughts="none") is not first


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"prefix": '{"params":'}, "unsupported assistant prefix"),
        ({"prefix": '{"function": "send_'}, "unsupported assistant prefix"),
        ({"prefix": "Sure! {"}, "unsupported assistant prefix"),
        ({"prefix": '{"function": "nope",'}, "not among the functions"),
        ({"prefix": '{"function": "send_message",', "choice": "pause_heartbeats"}, "does not allow"),
        ({"prefix": '{"inner_thoughts":'}, "needs inner_thoughts='top'"),
        ({"prefix": '{"function":', "inner_thoughts": "top"}, "'inner_thoughts' comes first"),
        ({"choice": "none"}, "neither 'auto', 'required' nor one of the functions"),
        ({"choice": "missing_function"}, "missing_function"),
        ({"inner_thoughts": "inside"}, "inner_thoughts must be"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(GrammarError, match=message):
        build_call_grammar(MEMGPT, **{"inner_thoughts": "params", **kwargs})


@pytest.mark.parametrize(
    "functions,message",
    [
        ([fn("deep", {"x": nested(20)})], "deeper than 16"),
        ([fn("wide", {"x": {"enum": list(range(12_000))}})], "too large"),
        ([fn(f"f{i}", {}) for i in range(257)], "too many functions"),
        ([fn("twice", {}), fn("twice", {})], "defined twice"),
        ([{"description": "no name"}], "without a name"),
        ([fn("bad", {"x": 5})], "must be an object"),
        ([fn("bad", {"x": {"type": "str"}})], "unknown JSON schema type"),
        ([fn("bad", {"x": {"enum": []}})], "non-empty list"),
        ([fn("bad", {"x": {"$ref": "https://example.com/s.json"}})], "only local"),
        ([fn("bad", {"x": {"$ref": "#/$defs/missing"}})], "points nowhere"),
        ([fn("bad", {"x": {"type": "array", "minItems": 3, "maxItems": 1}})], "maxItems < minItems"),
        ([fn("bad", {"x": {"type": "array", "maxItems": -1}})], "non-negative integer"),
        ([{"name": "bad", "parameters": "object"}], "JSON schema object"),
        ([{"name": "bad", "parameters": {"properties": {"x": {"type": "string"}}, "default": object()}}], "not JSON"),
        ([], "no functions"),
    ],
)
def test_bad_schemas(functions, message):
    with pytest.raises(GrammarError, match=message):
        build_call_grammar(functions, inner_thoughts="none")


def test_bounded_and_unbounded_array_lengths():
    functions = [fn("f", {"few": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 64},
                          "many": {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 5000}},
                    required=["few", "many"])]
    text = build_call_grammar(functions, inner_thoughts="none")
    assert accepts(text, call("f", few=[1, 2], many=list(range(100))))
    assert not accepts(text, call("f", few=[1], many=[1, 2, 3]))
    assert not accepts(text, call("f", few=[1, 2], many=[1, 2]))
    assert not accepts(text, call("f", few=list(range(65)), many=[1, 2, 3]))


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


# --- constrained generation on the real model ------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    # One thread: with two on this two-core box, any other load stalls llama.cpp's spinning thread barrier.
    return llama_cpp.Llama(str(grammar._smollm2_path()), n_ctx=2048, n_threads=1, verbose=False)


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


def test_smollm2_constrained_generation_gives_valid_calls(smollm2):
    cases = [
        ("params", "required", '{\n  "function":', "Hi! I'm Ana and I love green tea. Remember that."),
        ("top", "auto", '{\n  "inner_thoughts":', "What did we talk about yesterday?"),
        ("none", "core_memory_replace", "", "Actually my name is Bea, not Ana."),
    ]
    complete = 0
    for placement, choice, prefix, user in cases:
        text = build_call_grammar(MEMGPT, inner_thoughts=placement, choice=choice, prefix=prefix)
        out = smollm2.create_completion(
            prompt(user, placement) + prefix, grammar=llama_cpp.LlamaGrammar.from_string(text, verbose=False),
            max_tokens=128, temperature=0.7, seed=7,
        )["choices"][0]
        if out["finish_reason"] == "stop":  # a completion cut at max_tokens is a valid prefix, not a call
            check_call(prefix + out["text"], MEMGPT, placement, choice)
            complete += 1
    assert complete >= 2
