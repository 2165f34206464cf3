"""The pool's parts without a server: load reports as llama.cpp and vLLM write them, the choice of a
member, cool-downs, and conversation keys."""

from __future__ import annotations

import asyncio
import random

import pytest
from pool_helpers import member
from pytest_httpserver import HTTPServer
from server_helpers import InstantBackend, route

from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.backends.vllm import VLLMBackend
from llmproxy.errors import BackendConnectionError, BackendHTTPError, BackendProtocolError, BackendTimeoutError
from llmproxy.errors import ContextWindowExceededError, MembersDownError, OverloadedError
from llmproxy.server.config import RouteLimits
from llmproxy.server.pools.choice import choose
from llmproxy.server.pools.health import Health, member_failure
from llmproxy.server.pools.load import Load, LoadReader, parse_prometheus, parse_slots
from llmproxy.server.pools.pool import Pool
from llmproxy.server.pools.spec import MemberSpec, PoolSpec
from llmproxy.server.pools.sticky import Affinities, client_key

# As llama-server writes them: /slots (current and early-2024 field names) and /metrics with --metrics.
SLOTS_NOW = [{"id": 0, "n_ctx": 4096, "is_processing": True}, {"id": 1, "n_ctx": 4096, "is_processing": False}]
SLOTS_2024 = [{"id": 0, "state": 1}, {"id": 1, "state": 1}, {"id": 2, "state": 0}]
LLAMA_METRICS = """# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
"""
VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 5.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 2.0
vllm:num_requests_waiting_by_reason{model_name="Qwen/Qwen3-8B",reason="capacity"} 9.0
"""


def test_load_reports_are_read_as_the_servers_write_them():
    assert parse_slots(SLOTS_NOW) == Load(busy=1, slots=2)
    assert parse_slots(SLOTS_2024) == Load(busy=2, slots=3)
    assert parse_prometheus(LLAMA_METRICS, "llamacpp:requests_processing", "llamacpp:requests_deferred") == Load(2, 3)
    vllm = parse_prometheus(VLLM_METRICS, "vllm:num_requests_running", "vllm:num_requests_waiting")
    assert vllm == Load(busy=6, queued=2) and vllm.total == 8
    with pytest.raises(ValueError, match="neither"):
        parse_prometheus("# nothing\n", "vllm:num_requests_running", "vllm:num_requests_waiting")


def test_llama_cpp_without_slots_is_read_from_its_metrics_and_without_either_by_its_own_count(httpserver: HTTPServer):
    httpserver.expect_request("/slots").respond_with_json(
        {"error": {"code": 501, "message": "This server does not support slots endpoint.", "type": "not_supported_error"}},
        status=501)
    httpserver.expect_request("/metrics").respond_with_data(LLAMA_METRICS, content_type="text/plain")
    reader = LoadReader(LlamaCppBackend(httpserver.url_for("/"), context_window=64))
    assert asyncio.run(reader.read()) == Load(2, 3) and reader.slots_missing
    httpserver.clear()
    httpserver.expect_request("/metrics").respond_with_data("no metrics", status=501)
    assert asyncio.run(reader.read()) is None and reader.kind is None  # llmproxy's own count from now on


def test_vllm_load_is_read_from_its_metrics(httpserver: HTTPServer):
    httpserver.expect_request("/metrics").respond_with_data(VLLM_METRICS, content_type="text/plain")
    reader = LoadReader(VLLMBackend(httpserver.url_for("/"), model="Qwen/Qwen3-8B", context_window=64))
    assert asyncio.run(reader.read()) == Load(busy=6, queued=2)


def test_a_member_that_does_not_answer_its_check_raises():
    reader = LoadReader(LlamaCppBackend("http://127.0.0.1:9", context_window=64))
    with pytest.raises(BackendConnectionError):
        asyncio.run(reader.read())


def test_the_less_loaded_of_two_is_chosen_by_weighted_load_and_a_full_member_never():
    rng = random.Random(1)
    light, heavy = member("light", load=Load(1, slots=8)), member("heavy", load=Load(5, slots=8))
    assert choose([heavy, light], None, Affinities(), 2, rng) is light
    big = member("big", weight=4, load=Load(3, slots=8))  # 3 / 4 beats 1 / 1
    assert choose([light, big], None, Affinities(), 2, rng) is big
    full = member("full", load=Load(4, slots=4))
    assert choose([full, heavy], None, Affinities(), 2, rng) is heavy
    assert choose([full], None, Affinities(), 2, rng) is None
    mine = member("mine", max_running=2, in_flight=2)  # llmproxy's own limit for it
    assert choose([mine], None, Affinities(), 2, rng) is None


def test_requests_sent_since_the_last_report_count_until_the_next():
    reported = member("m", load=Load(busy=3, slots=4))
    assert not reported.full
    reported.in_flight += 1  # sent after the report: the backend now runs 4
    assert reported.load == 4 and reported.full
    reported.report(Load(busy=1, slots=4))  # the next report already counts it
    assert reported.load == 1 and not reported.full


def test_a_backend_with_requests_waiting_is_full_until_as_many_of_llmproxys_have_ended():
    vllm = member("vllm", load=Load(busy=6, queued=2), in_flight=4)  # no slots said: waiting requests say full
    assert vllm.full
    vllm.in_flight = 3
    assert vllm.full  # one ended: one waiting request took its place
    vllm.in_flight = 2
    assert not vllm.full  # two ended: nothing waits any more
    assert not member("idle", load=Load(busy=6)).full


def test_a_conversation_stays_within_the_bound_and_moves_past_it():
    affinities, rng = Affinities(), random.Random(1)
    first, second = member("first"), member("second")
    assert choose([first, second], "user:alice", affinities, 2, rng) is first
    first.in_flight = 2
    assert choose([first, second], "user:alice", affinities, 2, rng) is first  # 2 above the least loaded: stays
    first.in_flight = 3
    assert choose([first, second], "user:alice", affinities, 2, rng) is second  # past it: moves, and stays there
    first.in_flight = 0
    assert choose([first, second], "user:alice", affinities, 2, rng) is second


def test_the_conversation_map_is_bounded():
    affinities = Affinities(limit=2)
    for key in ("a", "b", "c"):
        affinities.put(key, "m")
    assert len(affinities) == 2 and affinities.get("a") is None


def test_cool_downs_grow_with_each_failure_in_a_row_and_end_with_a_success():
    now = [0.0]
    health = Health(lambda: now[0])
    health.failed("refused")
    assert not health.up and health.seconds_out() == 1 and not health.due()
    now[0] = 1.0
    assert health.due()
    health.failed("refused again")
    assert health.seconds_out() == 2
    for _ in range(10):
        health.failed("still")
    assert health.seconds_out() == 60  # at most a minute
    health.succeeded()
    assert health.up and health.failures_in_a_row == 0


@pytest.mark.parametrize("error,the_members", [
    (BackendConnectionError("refused", backend="llamacpp"), True),
    (BackendHTTPError("500", backend="llamacpp", url=None, status=500), True),
    (BackendHTTPError("503 loading", backend="llamacpp", url=None, status=503), True),
    (BackendHTTPError("400", backend="llamacpp", url=None, status=400), False),
    (BackendTimeoutError("silent", backend="llamacpp", setting="first_token_timeout"), True),
    (BackendProtocolError("cut off", backend="llamacpp"), True),
    (ContextWindowExceededError(9000, 4096), False),
    (MembersDownError("all out", retry_after=1), False),
])
def test_which_failures_are_the_members_own(error, the_members):
    assert member_failure(error) is the_members


def test_a_conversation_key_is_the_clients_own_where_it_sends_one():
    assert client_key({"prompt_cache_key": "abc", "user": "u"}, {}) == "prompt_cache_key:abc"
    assert client_key({"user": "u"}, {}) == "user:u"
    assert client_key({"metadata": {"user_id": "claude-user"}}, {}) == "user_id:claude-user"
    assert client_key({}, {"x-claude-code-session-id": "s1"}) == "session:s1"
    assert client_key({}, {"session_id": "codex"}) == "session:codex"
    assert client_key({"user": ""}, {}) is None


def test_a_conversation_waits_for_its_full_member_while_within_the_bound():
    affinities, rng = Affinities(), random.Random(1)
    home, away = member("home", max_running=1, in_flight=1), member("away", max_running=1)
    affinities.put("user:alice", "home")
    assert home.full and choose([home, away], "user:alice", affinities, 2, rng) is home  # 1 busy + itself: waits
    home.waiting = 1  # another request of hers waits for it already
    assert choose([home, away], "user:alice", affinities, 2, rng) is away  # 3 above an idle member: moves


def test_a_request_waiting_for_its_conversations_member_gets_it_when_it_frees():
    async def scenario() -> None:
        members = tuple(MemberSpec(name, route(InstantBackend()), 1.0, 1) for name in ("a", "b"))
        pool = Pool("p", PoolSpec(members), RouteLimits(2))
        home = await pool.take("user:alice", [])
        other = await pool.take("user:bob", [])
        pool.give_back(other)  # the other member is idle now
        waiting = asyncio.ensure_future(pool.take("user:alice", []))
        await asyncio.sleep(0.05)
        assert not waiting.done() and home.waiting == 1 and home.load == 2  # the wait counts in its load
        pool.give_back(home)
        assert await waiting is home and home.waiting == 0

    asyncio.run(scenario())


def test_a_request_finding_no_room_waits_a_minute_or_a_members_first_token_time_then_is_refused():
    def pool_of_one(backend) -> Pool:
        return Pool("p", PoolSpec((MemberSpec("a", route(backend), 1.0, 1),)), RouteLimits(1), clock=lambda: now[0])

    now = [0.0]
    short = LlamaCppBackend("http://127.0.0.1:9", first_token_timeout=5, context_window=64)
    long = LlamaCppBackend("http://127.0.0.1:9", first_token_timeout=600, context_window=64)
    assert pool_of_one(short).full_wait == 60 and pool_of_one(long).full_wait == 600

    async def scenario() -> None:
        pool = pool_of_one(InstantBackend())  # no first-token setting: 120 s
        await pool.take(None, [])  # its only place
        waiting = asyncio.ensure_future(pool.take(None, []))
        await asyncio.sleep(0.01)
        now[0] = 119.0
        pool._notify()  # something changed: still no room, and time left
        await asyncio.sleep(0.01)
        assert not waiting.done()
        now[0] = 121.0
        pool._notify()
        with pytest.raises(OverloadedError, match="no member of the model 'p' had room for the request within 120 s"):
            await waiting

    asyncio.run(scenario())
