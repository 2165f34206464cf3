"""Function-call semantics: from the calls a syntax read out of the answer to an OpenAI message.

- each call must name a function the request allows and its arguments must satisfy that function's
  JSON schema;
- ``request_heartbeat`` is stripped from ``send_message`` where its schema does not declare it;
- MemGPT's heartbeat rule (a memory call right after a real user message asks for a heartbeat);
- the answer is shaped as ``tool_calls`` or ``function_call``, whichever form the request used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from typing import Any

import jsonschema

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.common.nesting import client_json
from llmproxy.errors import FunctionCallError
from llmproxy.grammar.patterns import linear_validator
from llmproxy.syntaxes.base import Call
from llmproxy.types import (
    AnswerForm,
    ChatFinishReason,
    FunctionCall,
    FunctionDefinition,
    Message,
    ResponseMessage,
    ToolCall,
    UserMessage,
    content_text,
    new_id,
)

SEND_MESSAGE = "send_message"
HEARTBEAT_KEY = "request_heartbeat"
NO_HEARTBEAT_FUNCTIONS = frozenset({SEND_MESSAGE, "pause_heartbeats"})


# --- checking --------------------------------------------------------------------------------


@bounded_cache(16 * MIB)
def _validator(schema_json: str) -> Any:
    """A validator for a schema, by its canonical JSON: agents offer the same functions on every
    turn, and building a validator costs more than validating."""
    schema = json.loads(schema_json)
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return linear_validator(base)(schema)


@bounded_cache(16 * MIB)
def _parameters_validator(definition_json: str) -> Any:
    """``_validator`` for a function's parameters, by the definition's JSON, which the request has
    made already (serialising the schema again for the key costs a tenth of the parse)."""
    return _validator(json.dumps(json.loads(definition_json)["parameters"], sort_keys=True))


def check_call(call: Call, functions: Sequence[FunctionDefinition], allowed: Sequence[str], raw: str) -> Call:
    """Validate ``call`` against the offered functions and the ones the request allows (``tool_choice``);
    returns the cleaned call."""
    by_name = {function.name: function for function in functions}
    function = by_name.get(call.name)
    if function is None:
        raise FunctionCallError(
            f"The model called {call.name!r}, which is not one of the offered functions "
            f"({', '.join(by_name) or 'none'}).",
            raw,
        )
    if call.name not in allowed:
        raise FunctionCallError(f"The request required a call to {' or '.join(map(repr, allowed))} but the model "
                                f"called {call.name!r}.", raw)
    arguments = dict(call.arguments)
    if call.name == SEND_MESSAGE and HEARTBEAT_KEY not in function.parameters.get("properties", {}):
        arguments.pop(HEARTBEAT_KEY, None)
    problem = _first_problem(_parameters_validator(function.definition_json), arguments, "(arguments)")
    if problem:
        raise FunctionCallError(f"The model's arguments for {call.name!r} do not match its schema: {problem}.", raw)
    return Call(call.name, arguments)


def schema_problem(value: Any, schema: dict[str, Any], whole: str = "(answer)") -> str | None:
    """The first way ``value`` fails ``schema`` ("where: what"), or None when it is valid."""
    return _first_problem(_validator(json.dumps(schema, sort_keys=True)), value, whole)


def _first_problem(validator: Any, value: Any, whole: str) -> str | None:
    problems = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    if not problems:
        return None
    return f"{'/'.join(str(part) for part in problems[0].path) or whole}: {problems[0].message}"


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
        event = client_json(content_text(history[-1].content) or "")
    except ValueError:
        return call
    if not isinstance(event, dict) or event.get("type") != "user_message":
        return call
    return Call(call.name, {**call.arguments, HEARTBEAT_KEY: True})


# --- the OpenAI message ----------------------------------------------------------------------


def response_message(content: str | None, calls: Sequence[Call], form: AnswerForm,
                     reasoning: str | None = None) -> tuple[ResponseMessage, ChatFinishReason]:
    """The assistant message and finish reason, in the form (tools or legacy functions) the request used.
    The legacy form carries one call: the pipeline never lets more through for it."""
    thought = {"reasoning_content": reasoning, "reasoning": reasoning} if reasoning else {}
    if not calls:
        return ResponseMessage(content=content, **thought), "stop"
    function_calls = [FunctionCall(name=call.name, arguments=json.dumps(call.arguments, ensure_ascii=False))
                      for call in calls]
    if form == "functions":
        return ResponseMessage(content=content, function_call=function_calls[0], **thought), "function_call"
    tool_calls = [ToolCall(id=new_id("call", "_"), function=function_call) for function_call in function_calls]
    return ResponseMessage(content=content, tool_calls=tool_calls, **thought), "tool_calls"
