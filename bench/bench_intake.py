"""What reading a request body costs the server, with the nesting bound and without (not part of the test run).

The intake reads every body with llmproxy.common.nesting.client_json: pydantic-core's parser, which
stops at 200 levels. Timed here against json.loads, which the intake used before and which bounds
nothing, on the same bodies: a MemGPT chat request (bench/bench_server.py: 17.5 KB, 8 tools, 20
messages), the same as a Responses and a Messages request, and a Codex-like request with 100 KB of code
in its input; then the slow path, a body holding a lone surrogate (which that parser refuses), read by
json.loads and measured level by level.

Run: .venv/bin/python bench/bench_intake.py
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_faces import as_messages, as_responses  # noqa: E402
from bench_server import memgpt_request  # noqa: E402

from llmproxy.common.nesting import client_json  # noqa: E402


def codex_like(chat: dict) -> dict:
    code = "def f(x):\n    return [x[i] for i in range(len(x)) if {i: x}[i]]\n" * 400
    return {**as_responses(chat), "input": [{"type": "message", "role": "user",
                                             "content": [{"type": "input_text", "text": code}]}] * 4}


def microseconds(read, body: bytes) -> float:
    """The best of 7 runs, per read."""
    runs = min(timeit.repeat(lambda: read(body), number=500, repeat=7))
    return runs / 500 * 1e6


def main() -> None:
    chat = memgpt_request()
    bodies = {"MemGPT chat": chat, "as Responses": as_responses(chat), "as Messages": as_messages(chat),
              "Codex-like": codex_like(chat)}
    print(f"{'body':<22} {'bytes':>7} {'json.loads':>11} {'client_json':>12}")
    for name, fields in bodies.items():
        body = json.dumps(fields).encode()
        assert client_json(body) == json.loads(body)
        print(f"{name:<22} {len(body):7d} {microseconds(json.loads, body):9.1f} µs {microseconds(client_json, body):9.1f} µs")
    surrogate = json.dumps({**chat, "user": "\ud800"}).encode()  # escaped by json.dumps: \ud800
    print(f"{'MemGPT, a surrogate':<22} {len(surrogate):7d} {microseconds(json.loads, surrogate):9.1f} µs "
          f"{microseconds(client_json, surrogate):9.1f} µs   (the slow path: parsed twice, then measured)")


if __name__ == "__main__":
    main()
