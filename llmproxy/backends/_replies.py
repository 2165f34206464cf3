"""What a backend's reply says when it failed: the message in each server's error body shape, and
whether that message is a context-window overflow (each server words it differently).

Pure functions; ``_http.HTTPClient`` applies them to every error status, 200-with-error body and
mid-stream error event.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmproxy.errors import ContextWindowExceededError


def error_message(payload: Any) -> str | None:
    """The human message in any error body shape the local servers use, or None if there is none."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("msg") or json.dumps(error))
    if isinstance(error, str) and error:
        return error
    detail = payload.get("detail")  # koboldcpp, FastAPI (text-generation-webui)
    if isinstance(detail, dict):
        return str(detail.get("msg") or detail.get("error") or json.dumps(detail))
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    if isinstance(detail, str):
        return detail
    if payload.get("object") == "error":  # older vLLM
        return str(payload.get("message"))
    return None


def reports_error(payload: Any) -> bool:
    """Whether a 200 body (or stream event) is really an error report."""
    return isinstance(payload, dict) and (bool(payload.get("error")) or payload.get("object") == "error")


# Each backend words its context overflow differently; (pattern, group of prompt tokens, group of window).
_OVERFLOW_PATTERNS = (
    # llama.cpp, newest
    (re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)"), 1, 2),
    # vLLM ("... you requested M tokens (P in the messages, ...") and llama-cpp-python ("P in your prompt")
    (re.compile(r"maximum context length is (\d+) tokens[.,]\s*however,? you requested \d+ tokens"
                r" \((\d+) in (?:the messages|your prompt)", re.I), 2, 1),
    (re.compile(r"maximum context length is (\d+) tokens[.,]\s*however,? you requested (\d+) tokens", re.I), 2, 1),
    # LM Studio
    (re.compile(r"n_keep: (\d+)\s*>=\s*n_ctx: (\d+)"), 1, 2),
    (re.compile(r"Tokens in context: (\d+), Context length: (\d+)"), 1, 2),
)
_OVERFLOW_PHRASES = ("exceeds the available context size", "greater than the context length",
                     "context length exceeded", "maximum context length")
_OVERFLOW_CODES = ("context_length_exceeded", "exceed_context_size_error")
_WINDOW_ONLY = re.compile(r"maximum context length is (\d+)", re.I)


def context_overflow(message: str, payload: Any, where: str) -> ContextWindowExceededError | None:
    """The context-window error hidden in a backend's error reply, or None if it is another error."""
    for pattern, prompt_group, window_group in _OVERFLOW_PATTERNS:
        match = pattern.search(message)
        if match:
            prompt, window = int(match.group(prompt_group)), int(match.group(window_group))
            return ContextWindowExceededError(prompt, window, detail=f"{where} said: {message}")
    error = payload.get("error") if isinstance(payload, dict) else None
    fields = error if isinstance(error, dict) else {}
    if fields.get("code") in _OVERFLOW_CODES or fields.get("type") in _OVERFLOW_CODES or any(
        phrase in message.lower() for phrase in _OVERFLOW_PHRASES
    ):
        window_only = _WINDOW_ONLY.search(message)
        prompt = int(fields.get("n_prompt_tokens") or 0)
        window = int(fields.get("n_ctx") or (window_only.group(1) if window_only else 0))
        return ContextWindowExceededError(prompt, window, detail=f"{where} said: {message}")
    return None


def status_hint(status: int, backend: str) -> str:
    if status in (401, 403):
        return "check auth_type and auth_key: the server wants an API key or password"
    if status == 404:
        return f"check the endpoint and the backend type (is this a {backend} server?) and the model name"
    if status == 503:
        return "the server is busy or still loading the model; try again shortly"
    if status >= 500:
        return "check the server's log"
    return "the server rejected the request; check the settings sent to it"
