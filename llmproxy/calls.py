"""Function-call semantics: from the repaired JSON object to a checked call and an OpenAI message.

- the inner monologue moves out of the call JSON into the message ``content``;
- ``request_heartbeat`` is stripped from ``send_message``;
- the call must name a known function and its arguments must satisfy that function's JSON schema;
- MemGPT's heartbeat rule (a memory call right after a real user message asks for a heartbeat);
- the answer is shaped as ``tool_calls`` or ``function_call``, whichever form the request used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema

from llmproxy.errors import FunctionCallError, JSONRepairError, OutputParseError
from llmproxy.repair import repair
from llmproxy.types import (
    AnswerForm,
    ChatFinishReason,
    FunctionCall,
    FunctionDefinition,
    Message,
    ResponseMessage,
    ToolCall,
    ToolChoice,
    UserMessage,
    content_text,
    new_id,
)
from llmproxy.wrappers import INNER_THOUGHTS_KEY

SEND_MESSAGE = "send_message"
HEARTBEAT_KEY = "request_heartbeat"
NO_HEARTBEAT_FUNCTIONS = frozenset({SEND_MESSAGE, "pause_heartbeats"})

# Models do not always use the key names they were shown; these mean the same thing.
_NAME_KEYS = ("function", "name", "function_name", "tool")
_ARGUMENT_KEYS = ("params", "arguments", "parameters", "args")


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """What the model said: its inner thoughts (or plain text) and at most one call."""

    content: str | None
    call: Call | None
    repairs: tuple[str, ...] = ()


def parse_answer(text: str, *, call_required: bool) -> Answer:
    """Turn the model's JSON answer into content + call. Raises OutputParseError with the raw text."""
    try:
        repaired = repair(text)
    except JSONRepairError as exc:
        raise OutputParseError(f"The model's output holds no usable JSON object ({exc}).", text) from exc
    obj = repaired.value
    thoughts = obj.get(INNER_THOUGHTS_KEY)
    name, arguments = _find_call(obj)
    if name is None:
        if call_required:
            raise OutputParseError("The model's JSON has no function call in it.", text)
        if not isinstance(thoughts, str):
            raise OutputParseError("The model's JSON has neither a function call nor inner thoughts.", text)
        return Answer(thoughts, None, repaired.repairs)
    if not isinstance(name, str):
        raise OutputParseError("The model gave the function name as something other than a string.", text)
    params, extra_repairs = _arguments_object(arguments, text)
    inner = params.pop(INNER_THOUGHTS_KEY, None)
    content = thoughts if isinstance(thoughts, str) else inner if isinstance(inner, str) else None
    return Answer(content, Call(name, params), repaired.repairs + extra_repairs)


def _find_call(obj: dict[str, Any]) -> tuple[Any, Any]:
    """The function name and arguments, under whichever key the model used; (None, None) if none."""
    name_key = next((key for key in _NAME_KEYS if key in obj), None)
    if name_key is None:
        return None, None
    name = obj[name_key]
    if isinstance(name, dict):
        # The model restarted the whole object after a '{"function":' prefix: descend into it.
        return _find_call(name)
    if name is None or (isinstance(name, str) and name.strip().lower() in ("", "none", "null")):
        return None, None
    arguments = next((obj[key] for key in _ARGUMENT_KEYS if key in obj), {})
    return name, arguments


def _arguments_object(arguments: Any, raw: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    if arguments is None:
        return {}, ()
    if isinstance(arguments, str):
        # Arguments double-encoded as a JSON string.
        try:
            decoded = repair(arguments)
        except JSONRepairError as exc:
            raise OutputParseError("The call's arguments are a string that holds no JSON object.", raw) from exc
        return dict(decoded.value), ("decode_nested_json",) + decoded.repairs
    if not isinstance(arguments, dict):
        raise OutputParseError("The call's arguments are not a JSON object.", raw)
    return dict(arguments), ()


# --- checking --------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    """A validator for a parameters schema, by its canonical JSON: agents offer the same functions on
    every turn, and building a validator costs more than validating."""
    schema = json.loads(schema_json)
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)


def check_call(call: Call, functions: Sequence[FunctionDefinition], choice: ToolChoice, raw: str) -> Call:
    """Validate ``call`` against the offered functions and the tool choice; returns the cleaned call."""
    by_name = {function.name: function for function in functions}
    function = by_name.get(call.name)
    if function is None:
        raise FunctionCallError(
            f"The model called {call.name!r}, which is not one of the offered functions "
            f"({', '.join(by_name) or 'none'}).",
            raw,
        )
    if choice.mode == "named" and call.name != choice.name:
        raise FunctionCallError(f"The request required a call to {choice.name!r} but the model called {call.name!r}.", raw)
    arguments = dict(call.arguments)
    if call.name == SEND_MESSAGE and HEARTBEAT_KEY not in function.parameters.get("properties", {}):
        arguments.pop(HEARTBEAT_KEY, None)
    problems = sorted(_validator(json.dumps(function.parameters, sort_keys=True)).iter_errors(arguments),
                      key=lambda e: list(e.path))
    if problems:
        where = "/".join(str(part) for part in problems[0].path) or "(arguments)"
        raise FunctionCallError(
            f"The model's arguments for {call.name!r} do not match its schema: {where}: {problems[0].message}.", raw
        )
    return Call(call.name, arguments)


def apply_heartbeat_rule(call: Call, history: Sequence[Message], functions: Sequence[FunctionDefinition]) -> Call:
    """MemGPT's rule: a call (other than send_message/pause_heartbeats) made right after a real user
    message requests a heartbeat, so the agent gets to answer the user afterwards.

    Applied only where the function's schema declares ``request_heartbeat``, so the call stays valid.
    """
    if call.name in NO_HEARTBEAT_FUNCTIONS or not history or not isinstance(history[-1], UserMessage):
        return call
    declared = {f.name: f for f in functions}.get(call.name)
    if declared is None or HEARTBEAT_KEY not in declared.parameters.get("properties", {}):
        return call
    try:
        event = json.loads(content_text(history[-1].content) or "")
    except ValueError:
        return call
    if not isinstance(event, dict) or event.get("type") != "user_message":
        return call
    return Call(call.name, {**call.arguments, HEARTBEAT_KEY: True})


# --- the OpenAI message ----------------------------------------------------------------------


def response_message(content: str | None, call: Call | None, form: AnswerForm) -> tuple[ResponseMessage, ChatFinishReason]:
    """The assistant message and finish reason, in the form (tools or legacy functions) the request used."""
    if call is None:
        return ResponseMessage(content=content), "stop"
    function_call = FunctionCall(name=call.name, arguments=json.dumps(call.arguments, ensure_ascii=False))
    if form == "functions":
        return ResponseMessage(content=content, function_call=function_call), "function_call"
    tool_call = ToolCall(id=new_id("call", "_"), function=function_call)
    return ResponseMessage(content=content, tool_calls=[tool_call]), "tool_calls"
