"""A pool whose members' servers llmproxy starts from their ``command`` (bench/fake_backend.py, llama.cpp's
protocol): none runs before a request needs one, a second starts only once the first is full, a member
that dies is started again while the other serves, and an idle one stops after the ttl."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
from pool_helpers import member_route

from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.server.config import RouteLimits
from llmproxy.server.on_demand.spec import command_line
from llmproxy.server.pools.pool import Pool
from llmproxy.server.pools.spec import MemberSpec, PoolSpec

from .helpers import served, wait_for

FAKE = str(Path(__file__).parents[2] / "bench" / "fake_backend.py")


def started_member(name: str) -> MemberSpec:
    argv, endpoint = command_line([sys.executable, FAKE, "--port", "{port}"], None)
    return MemberSpec(name, member_route(LlamaCppBackend(endpoint, context_window=4096)), 1.0, 1, argv, 20.0)


def test_a_second_member_starts_only_when_the_first_is_full_and_both_stop_after_the_ttl():
    async def run() -> None:
        pool = Pool("pool", PoolSpec((started_member("a"), started_member("b")), poll_interval=3600, ttl=0.3),
                    RouteLimits(2))
        a, b = pool.members
        try:
            assert [a.server.state, b.server.state] == ["stopped", "stopped"]
            first = await pool.take(None, [])
            assert first is a and a.server.state == "running" and b.server.state == "stopped"
            second = await pool.take(None, [])  # a is full (max_running 1): b starts for this one
            assert second is b and b.server.process.starts == 1
            pool.give_back(a)
            await asyncio.sleep(0.4)
            await pool.check()
            assert [a.server.state, b.server.state] == ["stopped", "running"]  # b still has its request
            pool.give_back(b)
            await asyncio.sleep(0.4)
            await pool.check()
            assert b.server.state == "stopped" and b.server.process.process is None
            again = await pool.take(None, [])  # stopped members start again for the next request
            assert again is a and a.server.process.starts == 2
            pool.give_back(a)
        finally:
            await pool.aclose()

    asyncio.run(run())


def test_a_member_whose_server_dies_is_started_again_and_no_request_is_lost(tmp_path):
    command = [sys.executable, FAKE, "--port", "{port}"]
    config = f"""
[models.pool]
backend = "llamacpp"
wrapper = "chatml"
members = [{{ name = "a", command = {command!r}, max_running = 1 }},
           {{ name = "b", command = {command!r}, max_running = 1 }}]
""".replace("'", '"')
    with served(config, tmp_path, api_key="k") as server:
        key = {"Authorization": "Bearer k"}
        pool = server.app.state.service.pools["pool"]
        a, b = pool.members

        def ask() -> int:
            return httpx.post(f"{server.base_url}/completions", headers=key, timeout=30,
                              json={"model": "pool", "prompt": "Hello", "max_tokens": 5}).status_code

        assert a.server.process.process is None and b.server.process.process is None  # none before a request
        assert ask() == 200
        assert a.server.state == "running" and b.server.state == "stopped"
        health = httpx.get(f"http://127.0.0.1:{server.port}/health", headers=key).json()
        states = {entry["name"]: entry["state"] for entry in health["models"]["pool"]["members"]}
        assert states == {"a": "up", "b": "stopped"}
        os.kill(a.server.process.process.pid, signal.SIGKILL)
        assert wait_for(lambda: a.server.process.starts == 2, 10)  # started again at once
        assert "exited by itself" in a.server.process.tail()
        assert pool.report(details=False)["members"][0]["state"] == "starting"  # its health checked every 0.25 s
        assert ask() == 200  # it waited for a, out of the rotation until up: not sent to its port before
        assert a.server.state == "running" and b.server.state == "stopped" and a.requests == 2
