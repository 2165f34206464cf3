"""Caches keyed on client text are bounded by bytes: many distinct large requests cannot pin memory."""

from __future__ import annotations

import json

from llmproxy.common.bounded_cache import bounded_cache
from llmproxy.prompts import load_wrapper
from llmproxy.prompts._wrappers import _pretty
from llmproxy.types import UserMessage


def test_the_budget_holds_whatever_comes_through():
    @bounded_cache(10_000)
    def echo(text: str) -> str:
        return text.upper()

    for index in range(1_000):
        assert echo(f"{index:04d}" + "x" * 500) == f"{index:04d}" + "X" * 500
        assert echo.cache_bytes() <= 10_000
    assert echo.cache_bytes() > 5_000  # and it does cache


def test_recently_used_entries_stay_and_big_ones_are_not_kept():
    calls = []

    @bounded_cache(4_000)
    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    count("keep")
    for index in range(50):
        count(f"{index}" * 10)
        count("keep")  # touched each time: never the oldest
    count("big" * 1000)
    count("big" * 1000)
    assert calls.count("keep") == 1 and calls.count("big" * 1000) == 2


def test_a_thousand_distinct_large_messages_leave_the_message_cache_within_its_budget():
    _pretty.cache_clear()
    for index in range(1_000):
        _pretty(json.dumps({"type": "user_message", "message": f"{index} " + "word " * 20_000}), 2)  # ~100 KB each
    assert _pretty.cache_bytes() <= 16 << 20


def test_a_wrappers_cached_message_views_count_their_texts():
    wrapper = load_wrapper("chatml").wrapper
    messages = [UserMessage(role="user", content=f"{index} " + "word " * 20_000) for index in range(300)]
    views = [wrapper._message_view(message) for message in messages]  # ~100 KB each, three times in a view
    assert 8 << 20 < wrapper._views.cache_bytes() <= 16 << 20
    # ~400 KB an entry with its view's texts counted: about 40 fit, so the 100th from last is gone
    # (counting the key alone, about 160 would stay, holding three times the budget).
    assert wrapper._message_view(messages[-1]) is views[-1]
    assert wrapper._message_view(messages[-100]) is not views[-100]
