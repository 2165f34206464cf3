"""Helpers for the BFCL tests: the sample cases in BFCL's layout (tests/fixtures/bfcl/), right answers
made from their ground truths, and a fake OpenAI-compatible server that answers each case as told."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from llmproxy.evaluation.bfcl import Case
from llmproxy.evaluation.bfcl.tools import tool_name

SAMPLE = Path(__file__).parent / "fixtures" / "bfcl"
MODEL = "fake-fc-model"


def _resolved(value: Any) -> Any:
    """An acceptable value with the dicts inside it made concrete: each key's first acceptable value."""
    if isinstance(value, dict):
        return {key: _resolved(_first(options)[1]) for key, options in value.items() if _first(options)[0]}
    if isinstance(value, list):
        return [_resolved(item) for item in value]
    return value


def _first(options: list) -> tuple[bool, Any]:
    given = [option for option in options if option != ""]
    return (True, given[0]) if given else (False, None)


def right_calls(case: Case) -> list[tuple[str, dict[str, Any]]]:
    """The ground truth's first acceptable call(s), with the tool names the request carried."""
    calls = []
    for expected in case.ground_truth or []:
        (name, params), = expected.items()
        calls.append((tool_name(name), {param: _resolved(value) for param, options in params.items()
                                        for given, value in [_first(options)] if given}))
    return calls


def user_text(messages: list[dict[str, Any]]) -> str:
    return [message for message in messages if message["role"] == "user"][-1]["content"]


def chat_completion(calls: list[tuple[str, dict]] | None = None, text: str | None = None) -> dict[str, Any]:
    """OpenAI's chat completion, as its API sends it."""
    tool_calls = [{"id": f"call_{index}", "type": "function",
                   "function": {"name": name, "arguments": json.dumps(arguments)}}
                  for index, (name, arguments) in enumerate(calls or [])]
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}


class FakeOpenAI:
    """An OpenAI-compatible server on pytest-httpserver: GET /v1/models, and POST /v1/chat/completions
    answered by ``answer(case question text, request body)`` -> (status, body); records each body."""

    def __init__(self, server: HTTPServer, answer: Callable[[str, dict], tuple[int, dict]]) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        server.expect_request("/v1/models").respond_with_json(models)
        server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(self._complete)
        self.base_url = server.url_for("/v1")

    def _complete(self, request: Request) -> Response:
        body = json.loads(request.get_data())
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        status, reply = self.answer(user_text(body["messages"]), body)
        return Response(json.dumps(reply), status=status, content_type="application/json")
