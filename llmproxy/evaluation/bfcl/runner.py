"""BFCL cases sent to a server over HTTP, one at a time, through one face, each answer judged.

``run_cases`` is the whole of it for a library caller: cases (``load_cases``), a base URL as OpenAI's
clients take it (``http://127.0.0.1:8100/v1``), and back one ``CaseResult`` per case.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from llmproxy.errors import ConfigurationError
from llmproxy.evaluation.bfcl.data import Case
from llmproxy.evaluation.bfcl.faces import FACES, Face, check_faces
from llmproxy.evaluation.bfcl.verdicts import judge, server_failure

DEFAULT_TIMEOUT = 600.0  # seconds for one answer: a small model on CPU may think long


@dataclass(frozen=True)
class CaseResult:
    """One case's run: what was sent (in short), what came back, the verdict, and how long it took."""

    id: str
    category: str
    target: str
    face: str
    request: dict[str, Any]  # model, path, tools offered, number of messages
    calls: list[dict[str, str]]  # [{"name", "arguments"}] as the answer gave them
    content: Any  # the answer's text as the face gives it (None, a string, or the Messages API's text blocks)
    correct: bool
    kind: str | None
    bfcl_error_type: str | None
    error: str | None
    status: int | None  # the HTTP status; None when nothing answered
    seconds: float


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash; a ConfigurationError for one that is not http(s)."""
    if not base_url.startswith(("http://", "https://")):
        raise ConfigurationError(f"base URL {base_url!r} needs its scheme, e.g. http://127.0.0.1:8080/v1")
    return base_url.rstrip("/")


def served_model(client: httpx.Client, base_url: str, api_key: str | None, model: str | None = None) -> str:
    """``model``, else the first model ``GET /models`` lists. The request is made either way: it proves
    the server is there before a run starts."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = client.get(f"{base_url}/models", headers=headers)
    except httpx.TransportError as exc:
        raise ConfigurationError(f"cannot reach {base_url} ({type(exc).__name__}): start the server, or fix "
                                 "the URL (OpenAI's form, e.g. http://127.0.0.1:8080/v1)") from None
    if model is not None:
        return model
    try:
        return response.json()["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ConfigurationError(f"{base_url}/models names no model (HTTP {response.status_code}): give the "
                                 "model's name with --model") from None


def resolve_model(base_url: str, api_key: str | None = None, model: str | None = None) -> str:
    """The model a run at ``base_url`` names (``served_model``), asked before anything else runs."""
    with httpx.Client(timeout=10.0) as client:
        return served_model(client, check_base_url(base_url), api_key, model)


def _error_message(response: httpx.Response) -> str:
    """The error's message from OpenAI's or Anthropic's envelope, else the start of the body."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {response.status_code}: {message or response.text[:300]}"


def _request_summary(body: dict[str, Any], face: Face) -> dict[str, Any]:
    tools = body.get("tools") or []
    names = [tool["function"]["name"] if "function" in tool else tool["name"] for tool in tools]
    messages = body.get("messages", body.get("input", []))
    return {"model": body["model"], "path": face.path, "tools": names, "messages": len(messages)}


def run_case(client: httpx.Client, case: Case, base_url: str, model: str, *, face: Face,
             api_key: str | None = None, target: str | None = None) -> CaseResult:
    """Send ``case`` through ``face`` and judge the answer."""
    body = face.body(case, model)
    calls: list[dict[str, str]] = []
    content: Any = None
    status = None
    started = time.perf_counter()
    try:
        response = client.post(base_url + face.path, json=body, headers=face.headers(api_key))
        status = response.status_code
        if response.is_success:
            reply = face.reply(response.json())
            calls = [{"name": call.name, "arguments": call.arguments} for call in reply.calls]
            content = reply.text
            verdict = judge(case, reply)
        else:
            verdict = server_failure(case, _error_message(response))
    except httpx.HTTPError as exc:
        verdict = server_failure(case, f"{type(exc).__name__}: {exc}")
    except ValueError as exc:  # a body that is not this API's answer
        verdict = server_failure(case, f"not a {face.name} answer: {exc}")
    seconds = round(time.perf_counter() - started, 3)
    return CaseResult(case.id, case.category, target or base_url, face.name, _request_summary(body, face), calls,
                      content, verdict.correct, verdict.kind, verdict.error_type, verdict.error, status, seconds)


def run_cases(cases: Sequence[Case], base_url: str, *, face: str = "chat", model: str | None = None,
              api_key: str | None = None, target: str | None = None, timeout: float = DEFAULT_TIMEOUT,
              on_done: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Run ``cases`` against the OpenAI-compatible server at ``base_url`` (``http://host:port/v1``) through
    ``face`` (chat, responses or messages), one at a time, and judge each answer by BFCL's rules.

    ``model``: the name sent (default: the first one the server lists); ``target``: the label results
    carry (default: the base URL); ``on_done`` is called with each result as it comes.
    """
    check_faces([face])
    base_url = check_base_url(base_url)
    results = []
    with httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0)) as client:
        name = served_model(client, base_url, api_key, model)
        for case in cases:
            result = run_case(client, case, base_url, name, face=FACES[face], api_key=api_key, target=target)
            results.append(result)
            if on_done is not None:
                on_done(result)
    return results
