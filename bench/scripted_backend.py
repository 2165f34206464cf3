"""A scripted llama.cpp server for the real-client check (bench/e2e_clients.py): it plays a model that
uses the client's shell tool once and then answers in plain text (not part of the test run).

It speaks llama.cpp's protocol through bench/fake_backend.py's HTTP layer (GET /health and /props,
POST /tokenize, POST /completion whole or streamed as SSE, closing with ``stop: true``, the stop type
and the token counts) and reads each prompt llmproxy renders with a wrapper of Hermes-style tool
listings and calls (``hermes``, ``qwen3``):

    the prompt offers a shell tool and holds no marker output yet
        -> <tool_call>{"name": <the shell tool>, "arguments": {<the command>}}</tool_call>
           the command writes MARKER to marker.txt and prints it
    the prompt holds MARKER (the client ran the command and sent its output back)
        -> plain text ending with FINAL
    anything else (a prompt with no tools: titles, summaries)
        -> a short plain text

Options make the model more like real ones: ``preamble`` (a line of text before the call),
``parallel`` (a second call in the same answer, writing marker2.txt; the final answer waits for both
outputs), ``think`` (reasoning in <think> tags first), and ``pace`` (seconds between streamed tokens,
as a model generating them; 0 sends the whole stream at once).

With ``generic`` (on when run alone, for trying SDK examples), a prompt that offers other tools and
holds no tool result yet gets a call to the first one, with sample arguments from its schema, and a
prompt with a tool result gets a text that quotes it.

The command never spells MARKER literally (``printf '%s-%s\\n' llmproxy-e2e <nonce>``), so the marker
can only reach a prompt as the command's output. The grammar llmproxy sends is ignored: the script
writes valid calls. Every /completion is logged (``Script.log``) with its prompt.

Run one alone: .venv/bin/python bench/scripted_backend.py --port 8090 [--n-ctx 32768] [--pace 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_backend import FakeBackend, _completion, _completion_stream, _http, tokens  # noqa: E402
from threaded_server import ThreadedServer  # noqa: E402

# The shell tools of the clients, and the argument that holds the command.
SHELL_TOOLS = {"exec_command": "cmd", "shell_command": "command", "shell": "command", "Bash": "command"}


def offered_tools(prompt: str) -> dict[str, dict[str, Any]]:
    """The functions listed in the prompt's last ``<tools>`` block (the hermes layout: one
    ``{"type": "function", "function": {...}}`` object a line), by name."""
    start = prompt.rfind("<tools>")
    end = prompt.find("</tools>", start)
    if start < 0 or end < 0:
        return {}
    found = {}
    decoder = json.JSONDecoder()
    text, at = prompt[start + len("<tools>"):end], 0
    while (at := text.find("{", at)) >= 0:
        try:
            value, stop = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        function = value.get("function", value) if isinstance(value, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            found[function["name"]] = function
        at = stop
    return found


def shell_arguments(tool: dict[str, Any], key: str, command: str) -> dict[str, Any]:
    """The call's arguments: the command under ``key``, as an argv list where the schema wants an array
    (Codex's old ``shell`` tool), plus any other required string argument."""
    properties = (tool.get("parameters") or {}).get("properties") or {}
    arguments: dict[str, Any] = {key: ["bash", "-lc", command] if properties.get(key, {}).get("type") == "array"
                                 else command}
    for name in (tool.get("parameters") or {}).get("required") or []:
        if name not in arguments and (properties.get(name) or {}).get("type") == "string":
            arguments[name] = "write the e2e marker"
    return arguments


def sample_arguments(tool: dict[str, Any]) -> dict[str, Any]:
    """Arguments that fit a simple schema: the first enum value, else a sample of each type."""
    samples = {"string": "Paris", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    properties = (tool.get("parameters") or {}).get("properties") or {}
    arguments = {}
    for name, schema in properties.items():
        kind = schema.get("type")
        kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
        arguments[name] = schema["enum"][0] if schema.get("enum") else samples.get(kind, "Paris")
    return arguments


def last_tool_result(prompt: str) -> str | None:
    """The text of the prompt's last <tool_response> block (the hermes layout), if any."""
    start = prompt.rfind("<tool_response>")
    end = prompt.find("</tool_response>", start)
    return prompt[start + len("<tool_response>"):end].strip() if start >= 0 and end >= 0 else None


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@dataclass
class Script:
    """What the scripted model answers, and what it was asked."""

    nonce: str = field(default_factory=lambda: secrets.token_hex(6))
    log: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # "METHOD /path" of every request, in order
    generic: bool = False  # call any offered tool too (above)
    echo: bool = False  # print each step
    preamble: str = ""  # text the model writes before its call, as many models do
    parallel: bool = False  # a second call in the same answer, writing marker2.txt
    think: bool = False  # reason in <think> tags first (Qwen 3, DeepSeek R1 and the like)

    @property
    def marker(self) -> str:
        """What the command writes to marker.txt and prints."""
        return f"llmproxy-e2e-{self.nonce}"

    @property
    def second_marker(self) -> str:
        """What the parallel call writes to marker2.txt."""
        return f"llmproxy-e2e-second-{self.nonce}"

    @property
    def final(self) -> str:
        """What the final answer ends with."""
        return f"llmproxy-e2e-final-{self.nonce}"

    @property
    def command(self) -> str:
        return f"printf '%s-%s\\n' llmproxy-e2e {self.nonce} > marker.txt && cat marker.txt"

    @property
    def second_command(self) -> str:
        return f"printf '%s-%s\\n' llmproxy-e2e-second {self.nonce} > marker2.txt && cat marker2.txt"

    def answer(self, prompt: str) -> tuple[str, str]:
        """(what the model writes, which step of the script it is)."""
        text, step = self._answer(prompt)
        if not self.think:
            return text, step
        thought = "The marker command has to run before I can answer." if step.startswith("call") else "It ran."
        opened = prompt.rstrip().endswith("<think>")  # the template opened the block already
        return ("" if opened else "<think>\n") + f"{thought}\n</think>\n\n{text}", step + " (thinking)"

    def _answer(self, prompt: str) -> tuple[str, str]:
        if self.marker in prompt and (not self.parallel or self.second_marker in prompt):
            return f"The command ran and printed {self.marker}. Done: {self.final}", "final"
        tools = offered_tools(prompt)
        for name, key in SHELL_TOOLS.items():
            if name in tools:
                calls = [tool_call(name, shell_arguments(tools[name], key, self.command))]
                if self.parallel:
                    calls.append(tool_call(name, shell_arguments(tools[name], key, self.second_command)))
                step = f"call {name}" + (" twice" if self.parallel else "")
                return self.preamble + "\n".join(calls), step
        if self.generic and (result := last_tool_result(prompt)) is not None:
            return f"The tool answered: {result}", "final (generic)"
        if self.generic and tools:
            name, tool = next(iter(tools.items()))
            return tool_call(name, sample_arguments(tool)), f"call {name} (generic)"
        return "OK.", "plain (no shell tool offered)"


def paced_stream(transport: asyncio.BaseTransport, prompt_tokens: int, pieces: list[str], pace: float) -> None:
    """A streamed /completion as llama.cpp sends it while generating: one SSE event per token, ``pace``
    seconds apart, then the closing event with the counts."""
    whole = _completion_stream(prompt_tokens, pieces)
    head_end = whole.index(b"\r\n\r\n") + 4
    events = [whole[:head_end]] + [event + b"\n\n" for event in whole[head_end:].split(b"\n\n") if event]
    loop = asyncio.get_running_loop()
    for i, chunk in enumerate(events):
        loop.call_later(i * pace, lambda chunk=chunk: None if transport.is_closing() else transport.write(chunk))


class ScriptedBackend(FakeBackend):
    """fake_backend's llama.cpp server, answering /completion from a ``Script``."""

    script: Script
    props: bytes
    pace: float = 0.0  # seconds between streamed tokens; 0: the whole stream at once

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        self.script.requests.append(f"{method} {path}")
        if path == "/props":
            return _http("200 OK", self.props)
        if path != "/completion":
            return super().answer(method, path, body)
        request = json.loads(body or b"{}")
        prompt = request.get("prompt", "")
        text, step = self.script.answer(prompt if isinstance(prompt, str) else json.dumps(prompt))
        self.script.log.append({"step": step, "answer": text, "prompt": prompt, "stream": bool(request.get("stream")),
                                "n_predict": request.get("n_predict"), "stop": request.get("stop"),
                                "grammar": bool(request.get("grammar")),
                                "grammar_lazy": bool(request.get("grammar_lazy"))})
        if self.script.echo:
            print(f"/completion ({len(prompt)} chars of prompt): {step}: {text!r}", flush=True)
        prompt_tokens = len(prompt) // 4
        if request.get("stream") and self.pace > 0:
            paced_stream(self.transport, prompt_tokens, tokens(text), self.pace)
            return None
        if request.get("stream"):
            return _completion_stream(prompt_tokens, tokens(text))
        return _http("200 OK", _completion(prompt_tokens, tokens(text)))


def props(n_ctx: int, model: str = "scripted-hermes.gguf") -> bytes:
    """GET /props: the model file and per-slot context; no chat template (the route names a wrapper)."""
    return json.dumps({"model_path": f"/models/{model}", "total_slots": 1,
                       "default_generation_settings": {"n_ctx": n_ctx}}).encode()


class Running(ThreadedServer):
    """A scripted backend serving on 127.0.0.1 in a thread of its own, until ``stop``."""

    def __init__(self, script: Script, port: int = 0, n_ctx: int = 32768, pace: float = 0.0) -> None:
        self.script = script
        protocol = type("Scripted", (ScriptedBackend,), {"script": script, "props": props(n_ctx), "pace": pace})
        super().__init__(lambda loop: loop.create_server(protocol, "127.0.0.1", port), "the scripted backend")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, default=32768)
    parser.add_argument("--pace", type=float, default=0.0, help="seconds between streamed tokens")
    options = parser.parse_args()
    script = Script(generic=True, echo=True)
    running = Running(script, options.port, options.n_ctx, options.pace)
    print(f"scripted llama.cpp on {running.url}: marker {script.marker}, final {script.final}", flush=True)
    try:
        running.thread.join()
    except KeyboardInterrupt:
        running.stop()


if __name__ == "__main__":
    main()
