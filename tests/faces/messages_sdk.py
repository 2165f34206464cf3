"""The anthropic SDK reading bytes the Messages face made, with no server: a client whose transport
answers every request with one given response (and counts the requests, to see the SDK's retries)."""

from __future__ import annotations

import anthropic
import httpx2

QUESTION = [{"role": "user", "content": "Hi"}]


class Replaying:
    """An anthropic client whose every request gets ``status`` and ``content``."""

    def __init__(self, status: int, content: bytes, *, stream: bool = False, max_retries: int = 0) -> None:
        self.requests = 0
        headers = {"content-type": "text/event-stream" if stream else "application/json",
                   "retry-after-ms": "0"}  # the SDK's retries, without its back-off

        def answer(request: httpx2.Request) -> httpx2.Response:
            self.requests += 1
            return httpx2.Response(status, content=content, headers=headers)

        self.client = anthropic.Anthropic(
            api_key="unused", base_url="http://llmproxy.test", max_retries=max_retries,
            http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
            _strict_response_validation=True,  # every field checked against the SDK's types
        )


def final_message(sse: bytes) -> tuple[anthropic.types.Message, str]:
    """The message the SDK's stream helper rebuilds from ``sse``, and the text its text_stream gave."""
    client = Replaying(200, sse, stream=True).client
    with client.messages.stream(model="m", max_tokens=100, messages=QUESTION) as stream:
        text = "".join(stream.text_stream)
        return stream.get_final_message(), text
