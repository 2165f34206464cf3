"""Letting a request in: its API key, and its body read under the size limit as one JSON object.

A body nested more than 200 levels deep (llmproxy.common.nesting: every walker on a request's path
recurses per level) is a 400 naming the top-level field it is in, in the face's own envelope.

Only a body sent as ``application/json`` is read: a web page can POST text/plain or a form to any
address without the browser asking the server first (a CORS preflight), so a server without a key
would otherwise run generations for any page its user visits.
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from llmproxy.common.nesting import MAX_NESTING, TooDeep, client_json, nested_deeper
from llmproxy.errors import AuthenticationError, InvalidRequestError, PayloadTooLargeError, UnsupportedMediaTypeError
from llmproxy.server.disconnects import Cancelled


class Intake:
    """The checks every /v1 request passes before its body means anything."""

    def __init__(self, api_key: str | None, max_body_bytes: int) -> None:
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    def authorize(self, request: Request, *, cookie: str | None = None) -> None:
        """The server's key, sent as ``Authorization: Bearer KEY`` (OpenAI's clients, Claude Code's
        ``ANTHROPIC_AUTH_TOKEN``) or ``x-api-key: KEY`` (the anthropic SDK's ``ANTHROPIC_API_KEY``), or,
        where ``cookie`` names one, in that cookie (a browser's, for the inspector: llmproxy.server.inspector)."""
        if self.api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        sent = token.strip() if scheme.lower() == "bearer" else request.headers.get("x-api-key", "")
        if not sent and cookie is not None:
            sent = request.cookies.get(cookie, "")
        if not self.accepts(sent):
            browser = " In a browser, open /inspect?key=<key> once." if cookie is not None else ""
            raise AuthenticationError("Missing or wrong API key; send it as 'Authorization: Bearer <key>' "
                                      f"(or 'x-api-key: <key>').{browser}")

    def accepts(self, sent: str) -> bool:
        """Whether ``sent`` is the server's key (any is, without one)."""
        # Constant-time comparison: the time taken must not tell how much of a guess was right.
        return self.api_key is None or hmac.compare_digest(sent.encode(), self.api_key)

    async def json_body(self, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type", "")
        if content_type.partition(";")[0].strip().lower() != "application/json":
            sent = f"it says {content_type!r}" if content_type else "it has none"
            raise UnsupportedMediaTypeError(
                f"The request body must be JSON sent with the header 'Content-Type: application/json' ({sent}); "
                "with curl, add -H 'Content-Type: application/json'.", param="Content-Type")
        limit = self.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"The request body is {declared} bytes; this server takes at most {limit}.")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise PayloadTooLargeError(f"The request body is over this server's limit of {limit} bytes.")
        except ClientDisconnect:  # gone, or cut off for sending too slowly (llmproxy.server.connections)
            raise Cancelled() from None
        try:
            fields = client_json(body)
        except TooDeep:
            raise _too_deep(bytes(body)) from None
        except ValueError as exc:
            raise InvalidRequestError(f"The request body is not valid JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise InvalidRequestError("The request body must be a JSON object.")
        return fields


_SPACE = re.compile(r"[ \t\n\r]*")


def _too_deep(body: bytes) -> InvalidRequestError:
    field = _deep_field(body.decode("utf-8", errors="replace"))
    return InvalidRequestError(f"invalid request: {field or 'body'}: arrays and objects nested too deep (more than "
                               f"{MAX_NESTING} levels); flatten the value", param=field)


def _deep_field(text: str) -> str | None:
    """The top-level field whose value is too deep, found by reading the values one by one (as much
    work as one more parse, and only for a body already refused), or None."""
    decoder = json.JSONDecoder()
    at = _SPACE.match(text).end()
    if not text.startswith("{", at):
        return None
    try:
        while True:
            key, at = decoder.raw_decode(text, _SPACE.match(text, at + 1).end())
            at = _SPACE.match(text, at).end()
            if not isinstance(key, str) or not text.startswith(":", at):
                return None
            try:
                value, at = decoder.raw_decode(text, _SPACE.match(text, at + 1).end())
            except RecursionError:
                return key
            if nested_deeper(value, MAX_NESTING - 1):  # the body's own level is one of the limit's
                return key
            at = _SPACE.match(text, at).end()
            if not text.startswith(",", at):
                return None
    except ValueError:
        return None
