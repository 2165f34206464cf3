"""Hostile variants of valid requests, as hypothesis strategies: a seed (tests/fuzz_endpoints.py) with
one to three of its parts broken, anywhere in it.

A part is any value in the seed, found by walking it: a field, an item, a content block, a tool's
schema, a type, a role, a name, an id. It is replaced by random JSON of any type (lone surrogates,
huge numbers, nulls, JSON nested past or up to the server's limit), or by a value of its own type that
a face is likelier to read on (a word it may not know: an unknown item, block or tool type, an odd
``tool_choice``; JSON text nested too deep in a string: a past call's arguments, a tool's result; a
huge string or list; an object with a field of any name), or removed. The request names one of the
server's models, and is sent streamed or not.

Values nested deeper than ``json.dumps`` can write travel as ``Raw`` JSON text, spliced into the body.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

text = st.text(alphabet=st.characters(codec=None), max_size=40)  # lone surrogates included
scalars = st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | text
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                           max_leaves=20)
# Words a face reads as types, roles, modes and names: its own, the other faces', and none at all.
WORDS = st.sampled_from([
    "", " ", "x", "text", "input_text", "output_text", "image", "input_image", "input_file", "document", "message",
    "function", "function_call", "function_call_output", "custom", "custom_tool_call", "custom_tool_call_output",
    "namespace", "reasoning", "summary_text", "tool_use", "tool_result", "thinking", "redacted_thinking",
    "server_tool_use", "web_search", "web_search_call", "compaction", "user", "assistant", "system", "developer",
    "tool", "none", "auto", "any", "required", "tool", "allowed_tools", "json_schema", "json_object", "grammar",
    "lark", "regex", "enabled", "disabled", "adaptive", "ephemeral", "base64", "url", "list_files", "Bash",
    "apply_patch", "mcp__files__", "call_1", "toolu_1", "resp_0", "hermes", "chatml", "auto", "gbnf",
    "a" * 300, "\ud800", "<|im_start|>system", "[TOOL_CALLS]", "</tool_call>", "{{ 7*7 }}", "{% raw %}",
])
REPEATED_BYTES = 1 << 20  # a list repeated grows to this at most (huge, but not a run's whole memory)
# Nesting depths around the server's limit (200 levels, the body's own included) and far past it.
DEPTHS = st.sampled_from([3, 60, 150, 197, 198, 199, 200, 201, 256, 999, 1000, 5000])


@dataclass(frozen=True)
class Raw:
    """JSON text spliced into the body where this value stands."""

    text: str


def nested(depth: int, kind: str) -> str:
    """JSON text ``depth`` levels deep."""
    if kind == "arrays":
        return "[" * depth + "]" * depth
    if kind == "objects":
        return '{"a": ' * depth + '"x"' + "}" * depth
    half = depth // 2  # items and parts, as the faces' own shapes nest
    return '[{"type": "text", "content": ' * half + '"x"' + "}]" * half


def deep(draw: Any) -> str:
    return nested(draw(DEPTHS), draw(st.sampled_from(["arrays", "objects", "parts"])))


@st.composite
def hostile(draw: Any) -> Any:
    """A value of any kind to put where a part of a request was."""
    kind = draw(st.sampled_from(["json", "json", "word", "deep", "null", "empty"]))
    if kind == "json":
        return draw(json_values)
    if kind == "word":
        return draw(WORDS)
    if kind == "deep":
        return Raw(deep(draw))
    return None if kind == "null" else draw(st.sampled_from([{}, [], ""]))


@st.composite
def alike(draw: Any, part: Any) -> Any:
    """A hostile value of the same JSON type as ``part``, which a face is likelier to read on: a string
    for a string (an unknown word, JSON text too deep, a huge one), a number for a number, an object
    or a list with a hostile member more."""
    if isinstance(part, str):
        kind = draw(st.sampled_from(["word", "text", "deep text", "huge"]))
        if kind == "huge":
            return draw(st.sampled_from(["x", "{", "<|im_end|>", "\ud83d\ude00", " "])) * draw(st.sampled_from([5_000, 60_000]))
        return draw(WORDS) if kind == "word" else draw(text) if kind == "text" else deep(draw)
    if isinstance(part, bool) or part is None:
        return draw(st.sampled_from([True, False, None]))
    if isinstance(part, (int, float)):
        return draw(st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | st.sampled_from([0, -1, 2**63]))
    if isinstance(part, dict):
        return {**part, draw(WORDS | text): draw(hostile())}
    if isinstance(part, list):
        times = draw(st.sampled_from([1, 3, 300]))
        if times == 1 or not part or len(encode(part)) * times > REPEATED_BYTES:
            return [*part, draw(hostile())]
        return [copy.deepcopy(item) for _ in range(times) for item in part]  # copies: a later break hits one
    return draw(hostile())  # Raw text of an earlier break


def fresh(seed: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``seed`` that shares no part with it, nor one part with another (seeds reuse a schema)."""
    return json.loads(json.dumps(seed))


def places(value: Any) -> list[tuple[Any, ...]]:
    """The path of every part of ``value`` (keys and indexes from the top), the top itself first."""
    found, stack = [], [()]
    while stack:
        path = stack.pop()
        found.append(path)
        part = at(value, path)
        keys = part.keys() if isinstance(part, dict) else range(len(part)) if isinstance(part, list) else ()
        stack += [(*path, key) for key in reversed(list(keys))]
    return found


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


@st.composite
def broken(draw: Any, seed: dict[str, Any]) -> dict[str, Any]:
    """``seed`` (not changed) with one to three of its parts broken: replaced by a value of any kind or of
    its own kind, or removed."""
    body = fresh(seed)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places(body)))
        how = draw(st.sampled_from(["any", "alike", "alike", "remove"]))
        if not path:  # the body itself stays an object: a body of another type is the intake's own test
            body = draw(alike(body))
        elif how == "remove":
            del at(body, path[:-1])[path[-1]]
        else:
            part = at(body, path)
            at(body, path[:-1])[path[-1]] = draw(hostile() if how == "any" else alike(part))
    return body


@st.composite
def cases(draw: Any, endpoints: list[Any], models: list[str]) -> tuple[Any, dict[str, Any]]:
    """(an endpoint, a broken request to it); the request names one of ``models`` or keeps its own
    model's name, and is streamed or not where the endpoint streams."""
    endpoint = draw(st.sampled_from(endpoints))
    seed = dict(draw(st.sampled_from(endpoint.seeds)))
    if "model" in seed:
        seed["model"] = draw(st.sampled_from([seed["model"], *models]))
    if endpoint.streams:
        seed["stream"] = draw(st.booleans())
    return endpoint, draw(broken(seed))


def deepest(seed: dict[str, Any], levels: int) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``seed`` with, in turn, each of its objects holding a value that takes the body to ``levels`` of
    nesting, and each of its strings holding JSON text of ``levels``; with the path of the part changed."""
    for path in places(seed):
        part = at(seed, path)
        if isinstance(part, (dict, str)):
            body = fresh(seed)
            if isinstance(part, dict):  # the object is ``len(path) + 1`` levels down, the body being the first
                at(body, path)["deep"] = Raw(nested(levels - len(path) - 1, "objects"))
            else:
                at(body, path[:-1])[path[-1]] = nested(levels, "arrays")
            yield path, body


def encode(body: Any) -> bytes:
    """``body`` as the JSON a client sends: lone surrogates as ``\\ud800`` escapes, ``Raw`` text spliced in."""
    spliced: list[str] = []

    def placeholder(value: Any) -> str:
        if not isinstance(value, Raw):
            raise TypeError(f"not JSON: {value!r}")
        spliced.append(value.text)
        return f"\0raw{len(spliced) - 1}"

    payload = json.dumps(body, ensure_ascii=True, default=placeholder)
    for index, raw in enumerate(spliced):
        payload = payload.replace(f'"\\u0000raw{index}"', raw, 1)
    return payload.encode()
