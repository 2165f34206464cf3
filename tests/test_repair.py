"""Tests for llmproxy.repair: what small models really emit, what must be refused, and hostile input."""

from __future__ import annotations

import json
import time

import pytest

from llmproxy.errors import JSONRepairError, LLMProxyError
from llmproxy.repair import MAX_DEPTH, Repaired, repair, repair_json, repair_value
from llmproxy.repair import _repairer as repair_module
from tests.hostile_json import HOSTILE


def call(function: str, **params: object) -> dict:
    return {"function": function, "params": params}


SEND_HI = call("send_message", inner_thoughts="Greet them.", message="Hi there!")
SEND_HI_TEXT = json.dumps(SEND_HI)

# --- MemGPT's own fixtures (reference section 8), rewritten: same defects, own wording -----------

MEMGPT_MISSING_BRACE = """{
  "function": "send_message",
  "params": {
    "inner_thoughts": "I mixed up their name. Apologise and fix it.",
    "message": "My mistake! I thought you were Chad. Nice to meet you, Brad! "
  }
"""
MEMGPT_BAD_TOKEN_END = """{
  "function": "send_message",
  "params": {
    "inner_thoughts": "I mixed up their name. Apologise and fix it.",
    "message": "My mistake! I thought you were Chad. Nice to meet you, Brad! "
  }
}<|>"""
MEMGPT_DOUBLE_JSON = """{
  "function": "core_memory_append",
  "params": {
    "name": "human",
    "content": "Brad, 42, lives in Germany."
  }
}
{
  "function": "send_message",
  "params": {
    "message": "Noted! Your age and country are saved."
  }
}
"""
MEMGPT_HARD_LINE_FEEDS = """{
  "function": "send_message",
  "params": {
    "message": "Here is the plan:
- first we do X
- then Y!
- finally Z :)"
  }
}
"""
MEMGPT_PREFIX_OK_REST_BAD = """{
  "function": "send_message",
  "params": {
    "inner_thoughts": "User wants help debugging",
    "message": "Sure, Chad. Open the log file 'assistant.json' and paste the JSON you see. Then I can help.",
GARBAGEGARBAGEGARBAGEGARBAGE
GARBAGEGARBAGEGARBAGEGARBAGE
GARBAGEGARBAGEGARBAGEGARBAGE
"""
MEMGPT_ARCHIVAL_SEARCH = """

{
  "function": "archival_memory_search",
  "params": {
    "inner_thoughts": "Looking up WaitingForAction.",
    "query": "WaitingForAction",
"""
MEMGPT_ESCAPED_UNDERSCORES = """{
  "function":"send\\_message",
  "params": {
    "inner\\_thoughts": "User asks about themselves. Checking core memory.",
    "message": "You are Chad. Anything specific you want to talk about?"
"""

MEMGPT_BRAD = call(
    "send_message",
    inner_thoughts="I mixed up their name. Apologise and fix it.",
    message="My mistake! I thought you were Chad. Nice to meet you, Brad! ",
)

# (input, exact expected value, repairs that must be among those reported)
CASES = [
    # valid JSON: the fast path, nothing reported
    (SEND_HI_TEXT, SEND_HI, ()),
    ('  {"a": [1, 2.5, true, null], "b": {}}\n', {"a": [1, 2.5, True, None], "b": {}}, ()),
    ("{}", {}, ()),
    ('{"message": "line one\nline two\ttab"}', {"message": "line one\nline two\ttab"}, ()),
    # a comment right after a closed string value
    ('{"function": "send_message", "params": {"message": "Hello there", // greeting\n}}',
     call("send_message", message="Hello there"), ("strip_comment",)),
    # MemGPT's fixtures
    (MEMGPT_MISSING_BRACE, MEMGPT_BRAD, ("close_brackets",)),
    (MEMGPT_BAD_TOKEN_END, MEMGPT_BRAD, ("strip_suffix",)),
    (MEMGPT_DOUBLE_JSON, call("core_memory_append", name="human", content="Brad, 42, lives in Germany."),
     ("strip_suffix",)),
    (MEMGPT_HARD_LINE_FEEDS,
     call("send_message", message="Here is the plan:\n- first we do X\n- then Y!\n- finally Z :)"), ()),
    (MEMGPT_PREFIX_OK_REST_BAD,
     call("send_message", inner_thoughts="User wants help debugging",
          message="Sure, Chad. Open the log file 'assistant.json' and paste the JSON you see. Then I can help."),
     ("skip_garbage", "close_brackets")),
    (MEMGPT_ARCHIVAL_SEARCH,
     call("archival_memory_search", inner_thoughts="Looking up WaitingForAction.", query="WaitingForAction"),
     ("drop_trailing_comma", "close_brackets")),
    (MEMGPT_ESCAPED_UNDERSCORES,
     call("send_message", inner_thoughts="User asks about themselves. Checking core memory.",
          message="You are Chad. Anything specific you want to talk about?"),
     ("fix_escape", "close_brackets")),
    # the rest of MemGPT's cascade (reference 4.1)
    (SEND_HI_TEXT[:-1], SEND_HI, ("close_brackets",)),
    ('{"function": "send_message", "params": {"message": "y"\n', call("send_message", message="y"),
     ("close_brackets",)),
    ('{"function": "send_message", "params": {"message": "hello', call("send_message", message="hello"),
     ("close_string", "close_brackets")),
    ('{"function":"send_message","params":{"message":"hi"},', call("send_message", message="hi"),
     ("drop_trailing_comma", "close_brackets")),
    ('{"function": "send_message", "params": {"message": "hello,', call("send_message", message="hello,"),
     ("close_string",)),
    ('{"function":"send_message","params":{"message": Hello there, friend!}}',
     call("send_message", message="Hello there, friend!"), ("quote_value",)),
    # wrappers around the object
    ('```json\n{"function": "send_message", "params": {"message": "hi"}}\n```', call("send_message", message="hi"),
     ("strip_fence",)),
    ('Sure! Here is the call:\n```\n{"a": 1,}\n```\nLet me know.', {"a": 1}, ("strip_fence", "drop_trailing_comma")),
    ('```json\n{"a": "b", "c": "d\n```', {"a": "b", "c": "d"}, ("strip_fence", "close_string")),
    ("<think>The user said hi. {maybe} I should reply.</think>\n" + SEND_HI_TEXT, SEND_HI, ("strip_think",)),
    ("Okay, so they want a greeting.\n</think>\n\n" + SEND_HI_TEXT, SEND_HI, ("strip_think",)),
    ("<think>plan</think>" + SEND_HI_TEXT + "<think>done</think>", SEND_HI, ("strip_think",)),
    ("Here is my answer: " + SEND_HI_TEXT + " Hope that helps!", SEND_HI, ("strip_prefix", "strip_suffix")),
    ("<|im_start|>assistant\n" + SEND_HI_TEXT + "<|im_end|>", SEND_HI, ("strip_prefix", "strip_suffix")),
    ('{"function": "send_message", "params": {"message": "Hi Bob<|im_end|>\n<|im_start|>user\nhey',
     call("send_message", message="Hi Bob"), ("strip_special_token", "close_string")),
    ('{"function": "send_message", "params": {"message": "Hi</s>', call("send_message", message="Hi"),
     ("strip_special_token",)),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     {"name": "get_weather", "arguments": {"city": "Paris"}}, ("strip_prefix", "strip_suffix")),
    ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>',
     {"name": "get_weather", "parameters": {"city": "Paris"}}, ("strip_prefix",)),
    ('[TOOL_CALLS] {"name": "get_weather", "arguments": {"city": "Paris"}}',
     {"name": "get_weather", "arguments": {"city": "Paris"}}, ("strip_prefix",)),
    ("{{" + SEND_HI_TEXT[1:] + "}", SEND_HI, ("skip_garbage",)),
    # Python / JavaScript instead of JSON
    ("{'function': 'send_message', 'params': {'message': \"I'm here\", 'request_heartbeat': False}}",
     call("send_message", message="I'm here", request_heartbeat=False), ("single_quotes", "normalize_literal")),
    ("{'message': 'don't worry, it's fine'}", {"message": "don't worry, it's fine"}, ("single_quotes",)),
    ("{'message': 'it\\'s'}", {"message": "it's"}, ("single_quotes",)),
    ('{"a": True, "b": None, "c": TRUE, "d": undefined}', {"a": True, "b": None, "c": True, "d": None},
     ("normalize_literal",)),
    ('{"a": 1, // count\n "b": 2 /* two */, # py\n "c": "//not a comment"}', {"a": 1, "b": 2, "c": "//not a comment"},
     ("strip_comment",)),
    ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}, ("drop_trailing_comma",)),
    ('{"a": [1,, 2]}', {"a": [1, 2]}, ("drop_extra_comma",)),
    ('{function: "send_message", params: {message: "hi", request_heartbeat: true}}',
     call("send_message", message="hi", request_heartbeat=True), ("quote_key",)),
    ('{"function": send_message, "params": {"message": "hi"}}', call("send_message", message="hi"), ("quote_value",)),
    ('{"a": 1\n "b": "x"\n "c": [1 2]}', {"a": 1, "b": "x", "c": [1, 2]}, ("insert_comma",)),
    ("{\u201cmessage\u201d: \u201cHello, world\u201d}", {"message": "Hello, world"}, ("smart_quotes",)),
    ('{"message": "She said \u201chi\u201d"}', {"message": "She said \u201chi\u201d"}, ()),
    # escapes
    ('{"message": "send\\_message is a \\$5 \\*tool\\*"}', {"message": "send_message is a $5 *tool*"}, ("fix_escape",)),
    ('{"message": "it\\\'s"}', {"message": "it's"}, ("fix_escape",)),
    ('{"pattern": "\\d+\\.\\w", "path": "C:\\Users\\me"}', {"pattern": "\\d+.\\w", "path": "C:\\Users\\me"},
     ("fix_escape",)),
    ('{"message": "caf\\u00e9 \\ud83d\\ude00"}', {"message": "caf\u00e9 \U0001f600"}, ()),
    # unescaped quotes inside strings
    ('{"message": "He said "hi" to me", "x": 1}', {"message": 'He said "hi" to me', "x": 1}, ("escape_inner_quote",)),
    ('{"html": "<a href="https://x.org">link</a>"}', {"html": '<a href="https://x.org">link</a>'},
     ("escape_inner_quote",)),
    ('{"message": "Use "quotes", please."}', {"message": 'Use "quotes", please.'}, ("escape_inner_quote",)),
    ('{"city": "New York, "zip": "10001"}', {"city": "New York", "zip": "10001"}, ("close_string",)),
    ('{"status": "OK", "message": {\n "thought": "Welcome back."\n "message": "Hi!"\n}',
     {"status": "OK", "message": {"thought": "Welcome back.", "message": "Hi!"}}, ("insert_comma", "close_brackets")),
    # truncation anywhere (max_tokens)
    ('{"function": "send_message", "params": {"message": "hi"}, "request_heart', call("send_message", message="hi"),
     ("drop_truncated_key", "close_brackets")),
    ('{"a": 12', {"a": 12}, ("close_brackets",)),
    ('{"a": -3.5e', {"a": -3.5}, ("fix_number", "close_brackets")),
    ('{"a": tru', {"a": True}, ("complete_literal",)),
    ('{"a": "x", "b": fals', {"a": "x", "b": False}, ("complete_literal",)),
    ('{"a": [1, 2, {"b": "c', {"a": [1, 2, {"b": "c"}]}, ("close_string", "close_brackets")),
    ('{"message": "ends in a cut escape \\', {"message": "ends in a cut escape "}, ("close_string",)),
    ('{"function": "pause_heartbeats", "params": {', {"function": "pause_heartbeats", "params": {}},
     ("close_brackets",)),
    ('{"message": "forgot the quote}', {"message": "forgot the quote"}, ("close_string",)),
    ('{"function": "send_message", "params": {"message": "forgot the quote\n  }\n}',
     call("send_message", message="forgot the quote"), ("close_string",)),
    ('{"name": "write", "arguments": {"code": "def f():\\n    return {1: 2}',  # cut code keeps its "}"
     {"name": "write", "arguments": {"code": "def f():\n    return {1: 2}"}}, ("close_string",)),
    # brackets
    ('{"a": [1, 2}', {"a": [1, 2]}, ("fix_bracket",)),
    ('{"a": 1]}', {"a": 1}, ("fix_bracket",)),
    ('{"path": "todo.py", "content": "x"}, "append": false}', {"path": "todo.py", "content": "x", "append": False},
     ("fix_bracket",)),
    ('{"tool": "run", "arguments": {"code": "print(1)"}}}}', {"tool": "run", "arguments": {"code": "print(1)"}},
     ("strip_suffix",)),
    ('{"a": "}{"}', {"a": "}{"}, ()),
    # numbers
    ('{"a": .5, "b": +3, "c": 007, "d": 1.}', {"a": 0.5, "b": 3, "c": 7, "d": 1.0}, ("fix_number",)),
    ('{"date": 2024-01-05, "size": 12px}', {"date": "2024-01-05", "size": "12px"}, ("quote_value",)),
    ('{"a": NaN, "b": Infinity, "c": -Infinity}', {"a": None, "b": None, "c": None}, ("nonfinite_to_null",)),
    ('{"a": NaN, "b": [1, -Infinity', {"a": None, "b": [1, None]}, ("nonfinite_to_null", "close_brackets")),
    ('{"a": 1e999}', {"a": None}, ("nonfinite_to_null",)),  # valid JSON, but json.loads would give inf
    ('{"a": 1e999, "b": tru', {"a": None, "b": True}, ("nonfinite_to_null",)),
    # double encoding
    ('{"function": "send_message", "params": "{\\"message\\": \\"hi\\"}"}', call("send_message", message="hi"),
     ("decode_nested_json",)),
    ('{"name": "f", "arguments": "{\\"x\\": 1,"}', {"name": "f", "arguments": {"x": 1}},
     ("decode_nested_json", "drop_trailing_comma")),
    ('{"function": {"name": "f", "arguments": "{\\"x\\": 1}"}}', {"function": {"name": "f", "arguments": {"x": 1}}},
     ("decode_nested_json",)),
    ('{"message": "{\\"not\\": \\"decoded\\"}"}', {"message": '{"not": "decoded"}'}, ()),
    ('{"params": "{not json at all"}', {"params": "{not json at all"}, ()),
    (json.dumps(SEND_HI_TEXT), SEND_HI, ("decode_string",)),
    ('"{\\"function\\": \\"send_message\\", \\"params\\": {\\"message\\": \\"hi', call("send_message", message="hi"),
     ("decode_string", "close_string")),
    ('{\\"function\\": \\"send_message\\", \\"params\\": {\\"message\\": \\"hi\\"}}',
     call("send_message", message="hi"), ("unescape_json",)),
    # shapes reported on public issue trackers (MemGPT/Letta, Ollama, agent frameworks)
    ('\n{\n  "function": "send_message",{\n  "function": "send_message",\n  "params": {\n    "inner_thoughts": '
     '"Init done.",\n    "message": "Nice to meet you, Chad!"\n  }\n}',
     call("send_message", inner_thoughts="Init done.", message="Nice to meet you, Chad!"), ("skip_garbage",)),
    ('{"input": "*** Begin Patch\\n*** Update File: f.php\\n*** End Patch"}]',
     {"input": "*** Begin Patch\n*** Update File: f.php\n*** End Patch"}, ("strip_suffix",)),
    ('{"name": "write_log", "parameters": {"message": "}A"}}', {"name": "write_log", "parameters": {"message": "}A"}},
     ()),
    ('{"file_path": "src/data.ts", "content": "/** Products */\\nexport const P = [{id: 1}];\\n',
     {"file_path": "src/data.ts", "content": "/** Products */\nexport const P = [{id: 1}];\n"}, ("close_string",)),
    ('We wrote the file. Need tests.{"path": "tests/test_x.py", "content": "import x"}',
     {"path": "tests/test_x.py", "content": "import x"}, ("strip_prefix",)),
    ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
     {"name": "get_weather", "arguments": {"city": "Paris"}}, ("strip_prefix", "strip_suffix")),
    ('<think>I will call {"function": "send_message", "params": {"message": "hi"}}</think>',
     call("send_message", message="hi"), ("strip_prefix", "strip_suffix")),
    ('I will use {the send tool} now: {"function": "send_message", "params": {"message": "hi"}}',
     call("send_message", message="hi"), ("strip_prefix",)),
    ('{"a": ""b": 1}', {"a": "", "b": 1}, ("close_string", "insert_comma")),
    ("{'q': 'say \"hi\" to \\'them\\''}", {"q": "say \"hi\" to 'them'"}, ("single_quotes",)),
    ('{"a": "\\_", "b": "\\_", "c": [1, 2,', {"a": "_", "b": "_", "c": [1, 2]}, ("fix_escape", "close_brackets")),
    ("{\u201dmessage\u201d: \u201dhi\u201d}", {"message": "hi"}, ("smart_quotes",)),
]


@pytest.mark.parametrize(("text", "expected", "repairs"), CASES)
def test_repairs(text: str, expected: dict, repairs: tuple[str, ...]) -> None:
    result = repair(text)
    assert result.value == expected
    assert type(result.value) is dict
    assert set(repairs) <= set(result.repairs), result.repairs
    if not repairs:  # these are all valid JSON
        assert result.repairs == ()
    assert repair_json(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t ",
        "Hello! How can I help you today?",
        "{I think the user wants help}",
        "{More human than human is our motto.",
        "{Hey, thanks for logging in! :D\n### Inner Monologue: first login!\n}",
        "{",
        "{ // nothing here\n",
        '{"function":',
        '{"function": "send_message", "params": {"message":',
        '{"a": 1, "b":}',
        '{"a": , "b": 2}',
        '{"message"',
        '{"message" "hi"}',
        '{"a": 1, "b"}',
        '{"messag',
        "[1, 2, 3]",
        '[{"function": "send_message"}]',
        "42",
        '"just a string"',
        "null",
        "true",
        '"[1, 2]"',
        '"{\\"a\\":"',
        "``` \nno json here\n```",
    ],
)
def test_refuses(text: str) -> None:
    with pytest.raises(JSONRepairError) as info:
        repair(text)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, LLMProxyError)
    assert str(info.value)  # says what was wrong
    with pytest.raises(ValueError):
        repair_json(text)


def test_refuses_non_string() -> None:
    with pytest.raises(JSONRepairError):
        repair(b'{"a": 1}')  # type: ignore[arg-type]


def test_valid_json_uses_only_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> None:
        raise AssertionError("the repairing parser ran on valid JSON")

    monkeypatch.setattr(repair_module, "parse_container", boom)
    assert repair(SEND_HI_TEXT) == Repaired(SEND_HI, ())
    with pytest.raises(AssertionError):
        repair(SEND_HI_TEXT[:-1])


def test_result_is_frozen_and_repairs_are_unique_and_documented() -> None:
    result = repair("{'a': 'x', 'b': 'y', c: 1, d: 2")
    with pytest.raises(AttributeError):
        result.value = {}  # type: ignore[misc]
    assert isinstance(result.repairs, tuple)
    assert len(set(result.repairs)) == len(result.repairs)
    assert result.repairs == ("single_quotes", "quote_key", "close_brackets")
    for name in result.repairs:
        assert f"``{name}``" in repair_module.__doc__


def test_every_reported_repair_is_documented() -> None:
    seen = set()
    for text, _, _ in CASES:
        seen.update(repair(text).repairs)
    undocumented = {name for name in seen if f"``{name}``" not in repair_module.__doc__}
    assert not undocumented


def test_deep_but_allowed_nesting() -> None:
    depth = MAX_DEPTH - 1
    value = repair('{"a": ' + "[" * (depth - 1)).value
    for _ in range(depth - 1):
        assert isinstance(value, (dict, list))
        value = value["a"] if isinstance(value, dict) else value[0] if value else None
    assert value == []
    json.dumps(repair('{"a": ' + "[" * (depth - 1)).value)  # still serialisable


def test_nesting_limit_is_an_error_not_a_crash() -> None:
    with pytest.raises(JSONRepairError, match="nested deeper"):
        repair('{"a": ' + "[" * MAX_DEPTH)


# --- hostile input: linear time, no recursion ------------------------------------------------



@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_linear(name: str) -> None:
    text = HOSTILE[name]
    start = time.perf_counter()
    try:
        result = repair(text)
    except JSONRepairError:
        result = None
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"{name}: {elapsed:.1f}s"  # a hang guard only; bench/bench_repair.py measures
    if result is not None:
        assert isinstance(result.value, dict)


def test_a_think_tag_inside_a_json_string_is_text_not_a_thinking_block() -> None:
    repaired = repair_value('[{"name": "f", "arguments": {"city": "a</think>b[0=1"}}', expect="array")
    assert repaired.value == [{"name": "f", "arguments": {"city": "a</think>b[0=1"}}]
    assert "strip_think" not in repaired.repairs
