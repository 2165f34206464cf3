"""Reloading the config file (SIGHUP): the new models are served from then on, a request under way
finishes where it started, and a broken file is refused with the reason in the log, the old kept."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
from cli_helpers import command
from pool_helpers import on_loop, slot_servers
from server_helpers import free_port, pieces, route, running

from llmproxy.backends.base import Backend, Completion, GenerationParams, StreamDelta
from llmproxy.server.config import serving
from llmproxy.server.reload import Reloader

HI = [{"role": "user", "content": "hi"}]


class Gate(Backend):
    """Answers once the test opens the gate; ``entered`` is set when a generation is under way."""

    name = "gate"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        raise AssertionError("the server streams")

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        self.entered.set()
        assert self.gate.wait(30)
        for part in pieces("All done here."):
            yield StreamDelta(part)
        yield StreamDelta("", "stop", 5, 4)


def config(path: Path, url: str, name: str) -> Path:
    path.write_text(f'[models.{name}]\nbackend = "llamacpp"\nendpoint = "{url}"\nwrapper = "chatml"\n'
                    f'members = [{{ endpoint = "{url}" }}, {{ endpoint = "{url}", name = "again" }}]\n')
    return path


def test_a_reload_serves_the_new_models_and_keeps_requests_under_way(tmp_path: Path, caplog):
    gate = Gate()
    with slot_servers(1) as (llama,), running({"old": route(gate, "old")}) as server:
        path = config(tmp_path / "models.toml", llama.url, "new")
        reloader = Reloader(server.app, lambda: serving(path, {}))
        api = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        answers: list[str] = []
        under_way = threading.Thread(target=lambda: answers.append(api.chat.completions.create(
            model="old", messages=HI).choices[0].message.content))
        under_way.start()
        assert gate.entered.wait(30)
        assert on_loop(server, reloader.reload()) is True
        assert [card.id for card in api.models.list().data] == ["new"]
        gate.gate.set()
        under_way.join(30)
        assert answers == ["All done here."]  # finished on the backend it started on
        reply = api.chat.completions.create(model="new", messages=HI, tools=[
            {"type": "function", "function": {"name": "send_message", "parameters": {
                "type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}}])
        assert reply.choices[0].message.tool_calls[0].function.name == "send_message"
        assert len(llama.bodies) == 1
        health = httpx.get(f"http://127.0.0.1:{server.port}/health").json()
        assert [member["name"] for member in health["models"]["new"]["members"]] == ["llamacpp-1", "again"]

        path.write_text("[models.broken\n")  # not TOML
        with caplog.at_level(logging.ERROR, logger="llmproxy.server"):
            assert on_loop(server, reloader.reload()) is False
        assert "not valid TOML" in caplog.text and "the running configuration stays" in caplog.text
        assert [card.id for card in api.models.list().data] == ["new"]
        api.chat.completions.create(model="new", messages=HI)


def test_llmproxy_serve_reloads_its_config_file_on_sighup(tmp_path: Path):
    with slot_servers(1) as (llama,):
        path = config(tmp_path / "models.toml", llama.url, "first")
        port = free_port()
        process = subprocess.Popen(command("serve", "--config", str(path), "--port", str(port)),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            models = _models(port)
            assert models == ["first"]
            config(path, llama.url, "second")
            os.kill(process.pid, signal.SIGHUP)
            deadline = time.monotonic() + 30
            while models == ["first"] and time.monotonic() < deadline:
                time.sleep(0.1)
                models = _models(port)
            assert models == ["second"]
        finally:
            process.send_signal(signal.SIGINT)
            output = process.communicate(timeout=30)[0]
        assert "config file reloaded: models second" in output


def _models(port: int) -> list[str]:
    deadline = time.monotonic() + 60  # the server starts
    while True:
        try:
            return [card["id"] for card in httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"]]
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
