"""An instant fake backend for the benches: llama.cpp's server protocol and OpenAI's chat completions,
over real HTTP, answering a valid MemGPT ``send_message`` call at once (not part of the test run).

It is plain asyncio (an HTTP/1.1 keep-alive parser of its own, a few microseconds a request), so that
in a side-by-side run it costs every proxy the same and as little as possible. Its ``behaviour``:

    instant   answer at once (llama.cpp: POST /completion, streamed as one SSE event per token or
              whole; /tokenize, /props, /health; OpenAI: POST /v1/chat/completions with a tool call)
    hang      accept the connection, read the request, never answer
    fail      answer every request with HTTP 500

Run one alone: .venv/bin/python bench/fake_backend.py --port 8090 [--behaviour hang] [--message TEXT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

CALL_ARGUMENTS = {"inner_thoughts": "Answer from memory.", "message": "You love the Eiger trail!"}


def call_answer(message: str) -> str:
    """The text the model writes after the wrappers' '{\n  "function":' prefix: a send_message call."""
    return (' "send_message",\n  "params": {\n    "inner_thoughts": "Answer from memory.",\n'
            f'    "message": {json.dumps(message)}\n  }}\n}}')


def tokens(answer: str) -> list[str]:
    """``answer``'s tokens (~ what SmolLM2's tokenizer makes of it: a delta per token, as llama.cpp streams)."""
    return [answer[i:i + 3] for i in range(0, len(answer), 3)]


ANSWER = call_answer(CALL_ARGUMENTS["message"])
TOKENS = tokens(ANSWER)


def _http(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: " + content_type +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _completion(prompt_tokens: int, answer: list[str]) -> bytes:
    return json.dumps({"content": "".join(answer), "stop": True, "stop_type": "eos",
                       "tokens_evaluated": prompt_tokens, "tokens_predicted": len(answer)}).encode()


def _completion_stream(prompt_tokens: int, answer: list[str]) -> bytes:
    events = [b"data: " + json.dumps({"content": token, "stop": False}).encode() + b"\n\n" for token in answer]
    final = {"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": prompt_tokens,
             "tokens_predicted": len(answer)}
    events.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    body = b"".join(events)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n\r\n" + body)


def _chat(model: str) -> bytes:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "send_message", "arguments": json.dumps(CALL_ARGUMENTS)}}
    return json.dumps({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": len(TOKENS), "total_tokens": 2000 + len(TOKENS)},
    }).encode()


PROPS = json.dumps({"model_path": "/models/fake.gguf", "default_generation_settings": {"n_ctx": 8192}}).encode()


class FakeBackend(asyncio.Protocol):
    """One connection: requests in, answers out, in order."""

    behaviour = "instant"
    tokens = TOKENS  # what llama.cpp answers, token by token

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4:head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length:]
            method, path = head.split(" ", 2)[:2]
            answer = self.answer(method, path, body)
            if answer is not None:
                self.transport.write(answer)

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        if self.behaviour == "hang":
            return None
        if self.behaviour == "fail":
            return _http("500 Internal Server Error", b'{"error": {"message": "the fake backend fails"}}')
        if path == "/health":
            return _http("200 OK", b'{"status": "ok"}')
        if path == "/props":
            return _http("200 OK", PROPS)
        if path == "/v1/models":
            return _http("200 OK", b'{"object": "list", "data": [{"id": "fake", "object": "model"}]}')
        request = json.loads(body or b"{}")
        if path == "/tokenize":
            return _http("200 OK", json.dumps({"tokens": list(range(len(request["content"]) // 4))}).encode())
        if path == "/completion":
            prompt_tokens = len(request.get("prompt", "")) // 4
            if request.get("stream"):
                return _completion_stream(prompt_tokens, self.tokens)
            return _http("200 OK", _completion(prompt_tokens, self.tokens))
        if path == "/v1/chat/completions":
            return _http("200 OK", _chat(request.get("model", "fake")))
        return _http("404 Not Found", b'{"error": {"message": "no such path"}}')


async def serve(port: int, behaviour: str, message: str = CALL_ARGUMENTS["message"]) -> None:
    protocol = type("Fake", (FakeBackend,), {"behaviour": behaviour, "tokens": tokens(call_answer(message))})
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--behaviour", choices=["instant", "hang", "fail"], default="instant")
    parser.add_argument("--message", default=CALL_ARGUMENTS["message"], help="the send_message text llama.cpp answers")
    options = parser.parse_args()
    asyncio.run(serve(options.port, options.behaviour, options.message))


if __name__ == "__main__":
    main()
