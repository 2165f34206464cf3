"""The wire APIs a BFCL case is sent through, each as BFCL's own handler for it sends the case, and
each answer read back into the same calls.

    chat       POST /v1/chat/completions   BFCL's OpenAI chat-completions handler (its FC mode)
    responses  POST /v1/responses          BFCL's OpenAI Responses handler (for OpenAI's non-reasoning models)
    messages   POST /v1/messages           BFCL's Claude handler: Anthropic's tool format

Every face sends the first turn's messages, ``temperature: 0.001`` and the tools (none when the case
offers none), and no ``tool_choice``; the Messages API requires ``max_tokens``, the others get none.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from llmproxy.errors import ConfigurationError
from llmproxy.evaluation.bfcl.data import Case
from llmproxy.evaluation.bfcl.tools import tool_function

TEMPERATURE = 0.001  # BFCL's default: near-greedy, where a server may refuse 0
MESSAGES_MAX_TOKENS = 4096  # required by the Messages API; BFCL sends the model's maximum, llmproxy clamps it
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # the arguments' JSON text, as the answer gave it


@dataclass(frozen=True)
class Reply:
    """An answer: its calls, and its text as BFCL's handler for the face keeps it (chat: the message's
    content, a string or None; Responses: ``output_text``, the joined text parts; Messages: the list of
    text blocks)."""

    calls: list[Call]
    text: Any

    def model_result(self) -> Any:
        """What BFCL records as the model's answer: ``[{name: arguments JSON}, ...]`` when it called, else
        the text (which its decoder then fails to read as calls, unless it is empty)."""
        return [{call.name: call.arguments} for call in self.calls] if self.calls else self.text


class Face:
    name: str
    path: str

    def body(self, case: Case, model: str) -> dict[str, Any]:
        raise NotImplementedError

    def reply(self, document: Any) -> Reply:
        """The calls and text of a successful response's JSON; ValueError when it is not this API's."""
        raise NotImplementedError

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _messages(case: Case) -> list[dict[str, Any]]:
    return copy.deepcopy(case.messages)


def _field(document: Any, *path: Any) -> Any:
    """``document[path[0]][path[1]]...``; ValueError naming the path when it is not there."""
    value = document
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"no {'.'.join(map(str, path))} in the response") from None
    return value


class ChatFace(Face):
    name = "chat"
    path = "/chat/completions"

    def body(self, case: Case, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": _messages(case), "model": model, "temperature": TEMPERATURE, "store": False}
        if case.functions:
            body["tools"] = [{"type": "function", "function": tool_function(doc)} for doc in case.functions]
        return body

    def reply(self, document: Any) -> Reply:
        message = _field(document, "choices", 0, "message")
        calls = [Call(_field(call, "function", "name"), _field(call, "function", "arguments"))
                 for call in message.get("tool_calls") or []]
        return Reply(calls, message.get("content"))


class ResponsesFace(Face):
    name = "responses"
    path = "/responses"

    def body(self, case: Case, model: str) -> dict[str, Any]:
        # The Responses API's system role is for the platform's own messages: BFCL sends the case's as developer.
        messages = [{**message, "role": "developer"} if message["role"] == "system" else message
                    for message in _messages(case)]
        body: dict[str, Any] = {"input": messages, "model": model, "store": False, "temperature": TEMPERATURE}
        if case.functions:
            body["tools"] = [{**tool_function(doc), "type": "function"} for doc in case.functions]
        return body

    def reply(self, document: Any) -> Reply:
        calls, texts = [], []
        for item in _field(document, "output"):
            if item.get("type") == "function_call":
                calls.append(Call(_field(item, "name"), _field(item, "arguments")))
            elif item.get("type") == "message":
                texts.extend(part.get("text", "") for part in item.get("content") or []
                             if part.get("type") == "output_text")
        return Reply(calls, "".join(texts))


class MessagesFace(Face):
    name = "messages"
    path = "/messages"

    def body(self, case: Case, model: str) -> dict[str, Any]:
        messages = _messages(case)
        system = next((message for message in messages if message["role"] == "system"), None)
        if system is not None:  # the first system message goes to ``system``; Anthropic's roles alternate
            messages.remove(system)
        turns: list[dict[str, Any]] = []
        for message in messages:
            if message["role"] == "user" and turns and turns[-1]["role"] == "user":
                turns[-1]["content"] += "\n\n" + message["content"]
            else:
                turns.append(message)
        body: dict[str, Any] = {
            "model": model, "max_tokens": MESSAGES_MAX_TOKENS, "temperature": TEMPERATURE,
            "tools": [_anthropic_tool(doc) for doc in case.functions],
            "messages": [{**turn, "content": [{"type": "text", "text": turn["content"]}]} for turn in turns],
        }
        if system is not None:
            body["system"] = [{"type": "text", "text": system["content"]}]
        return body

    def reply(self, document: Any) -> Reply:
        calls, texts = [], []
        for block in _field(document, "content"):
            if block.get("type") == "tool_use":
                calls.append(Call(_field(block, "name"), json.dumps(_field(block, "input"))))
            elif block.get("type") == "text":
                texts.append(block.get("text", ""))
        return Reply(calls, texts)

    def headers(self, api_key: str | None) -> dict[str, str]:
        keys = {"Authorization": f"Bearer {api_key}", "x-api-key": api_key} if api_key else {}
        return {**keys, "anthropic-version": ANTHROPIC_VERSION}


def _anthropic_tool(doc: dict[str, Any]) -> dict[str, Any]:
    function = tool_function(doc)
    function["input_schema"] = function.pop("parameters")
    if "response" in function:  # Anthropic's tools have no field for it: BFCL describes it
        schema = json.dumps(function.pop("response"))
        function["description"] += f" The response field has the following schema: {schema}"
    return function


FACES: dict[str, Face] = {face.name: face for face in (ChatFace(), ResponsesFace(), MessagesFace())}


def check_faces(names: list[str]) -> None:
    unknown = [name for name in names if name not in FACES]
    if unknown:
        raise ConfigurationError(f"unknown face {unknown[0]!r}: use one of {', '.join(FACES)}")
