"""Shared by the Responses face's tests: requests like Codex's, a real chat stream to translate (the
pipeline's own plan and finish on a Qwen 3 route whose backend answers from a script), and the openai
SDK reading the bytes the face made, with no server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx2
import openai

from llmproxy.backends.base import Completion
from llmproxy.faces.responses import ResponsesEvents, ResponsesRequest, read_request, response_object
from llmproxy.prompts import load_wrapper
from llmproxy.proxy import finish, plan, streams_calls
from llmproxy.route import Route
from llmproxy.faces.chat.chunks import ChatChunks
from llmproxy.types import ChatCompletion
from scripted_backend import ScriptedBackend

EXEC = {"type": "function", "name": "exec_command", "description": "Run a shell command.", "strict": True,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"],
                       "additionalProperties": False}}
FILES = {"type": "namespace", "name": "mcp__files__", "description": "The files MCP server.",
         "tools": [{"type": "function", "name": "list", "parameters": {
             "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark",
                    "definition": 'start: "*** Begin Patch\\n" /[^*]*/ "*** End Patch"'}}
NOTES = {"type": "custom", "name": "take_note", "description": "Write a note."}  # free text
CODEX_TOOLS = [EXEC, FILES, PATCH, NOTES, {"type": "web_search"}]

RESPONSE_ID = "resp_0123456789abcdef01234567"
CREATED = 1_760_000_000


def body(input: Any = "Hi", **fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": input, **fields}


def codex_body(input: Any = "List the files.", **fields: Any) -> dict[str, Any]:
    """A request shaped like Codex's: its tools, streamed, reasoning sent back sealed."""
    codex = dict(tools=CODEX_TOOLS, tool_choice="auto", parallel_tool_calls=True, stream=True, store=False,
                 include=["reasoning.encrypted_content"], reasoning={"effort": "medium", "summary": "auto"},
                 prompt_cache_key="conversation-1")
    return body(input, **{**codex, **fields})


def answer_call(name: str, arguments: dict[str, Any]) -> str:
    """A Hermes/Qwen call as the model writes it."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@dataclass
class Streamed:
    """One request streamed through the face: its events object, the bytes sent and the answer."""

    request: ResponsesRequest
    events: ResponsesEvents
    frames: list[bytes]
    completion: ChatCompletion

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [payload for _, payload in parse_sse(b"".join(self.frames))]


def _route(grammar: bool) -> Route:
    return Route(name="qwen", backend=ScriptedBackend(grammar=grammar), wrapper=load_wrapper("qwen3").wrapper)


def planned(request: ResponsesRequest, *, grammar: bool = True):
    """The pipeline's plan for the request's chat form, on a Qwen 3 route."""
    return plan(request.chat, _route(grammar))


def completion_for(request: ResponsesRequest, raw: str, finish_reason: str = "stop", *,
                   grammar: bool = True) -> ChatCompletion:
    """What the pipeline makes of the model writing ``raw`` for the request."""
    return finish(planned(request, grammar=grammar), Completion(raw, finish_reason, 50, 20))


def chat_chunks(request: ResponsesRequest, *, grammar: bool = True) -> ChatChunks:
    """The chat chunk builder the server makes for the request (calls streamed where a grammar writes them)."""
    prepared = planned(request, grammar=grammar)
    return ChatChunks(prepared.rendered, "m", include_usage=False, stream_calls=streams_calls(prepared))


def stream(request_body: dict[str, Any], raw: str, finish_reason: str = "stop", *, size: int = 5,
           grammar: bool = True) -> Streamed:
    """The request streamed: the model's ``raw`` text fed in pieces of ``size`` characters, then the
    pipeline's checked answer to close (a backend with grammars streams the calls as written)."""
    request = read_request(request_body)
    events = ResponsesEvents(request, chat_chunks(request, grammar=grammar), response_id=RESPONSE_ID,
                             created_at=CREATED)
    frames = events.opening()
    for start in range(0, len(raw), size):
        frames += events.feed(raw[start:start + size])
    completion = completion_for(request, raw, finish_reason, grammar=grammar)
    frames += events.closing(completion)
    return Streamed(request, events, frames, completion)


def whole(request_body: dict[str, Any], raw: str, finish_reason: str = "stop") -> dict[str, Any]:
    """The non-streamed response object for the model writing ``raw``."""
    request = read_request(request_body)
    return response_object(request, completion_for(request, raw, finish_reason), response_id=RESPONSE_ID,
                           created_at=CREATED)


def parse_sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, payload) of each event, checking the framing on the way."""
    events = []
    for block in data.decode("utf-8").split("\n\n")[:-1]:
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: "), block
        events.append((name_line[len("event: "):], json.loads(data_line[len("data: "):])))
    return events


def sdk_client(content: bytes, *, stream: bool) -> openai.OpenAI:
    """An openai client whose every request is answered with ``content``."""
    headers = {"content-type": "text/event-stream" if stream else "application/json"}

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=content, headers=headers)

    return openai.OpenAI(api_key="unused", base_url="http://llmproxy.test/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))
