"""Request ids: every response carries ``x-request-id``, and the request's log line names the same id.

A client's own id is echoed when it looks like one (so a request can be followed across the
client's logs, a gateway's and ours); anything else (too long, odd characters that could forge log
lines) is replaced by a fresh ``req_...`` id, like OpenAI's.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable

from starlette.types import Message, Scope, Send

from llmproxy.types import new_id

HEADER = b"x-request-id"
_SANE = re.compile(rb"[\w.:/+=@-]{1,128}", re.ASCII)


def request_id(scope: Scope) -> str:
    """The id of the request in ``scope``, once ``with_request_id`` has given it one."""
    return scope["state"]["request_id"]


def request_id_header(scope: Scope) -> tuple[bytes, bytes]:
    """The ``x-request-id`` header of the response to the request in ``scope`` (given its id)."""
    return HEADER, scope["state"]["request_id"].encode()


def with_request_id(scope: Scope, send: Send) -> Send:
    """Give the request in ``scope`` its id, and ``send`` wrapped to put it on the response."""
    sent = next((value for key, value in scope["headers"] if key == HEADER), None)
    value = sent if sent is not None and _SANE.fullmatch(sent) else new_id("req", "_").encode()
    scope.setdefault("state", {})["request_id"] = value.decode()

    def send_with_id(message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), (HEADER, value)]
        return send(message)  # the server's own send, awaited by the caller: no frame of ours for every token

    return send_with_id
