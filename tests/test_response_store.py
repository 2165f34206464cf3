"""The Responses API's store: bounded by bytes (least recently used out first) and by age."""

from __future__ import annotations

from llmproxy.server.response_store import ResponseStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_least_recently_used_go_first_past_the_byte_bound():
    store = ResponseStore(max_bytes=100)
    for name in "abc":
        assert store.put(name, name.upper(), 40)
    assert store.get("a") is None and (store.get("b"), store.get("c")) == ("B", "C") and store.bytes == 80
    store.get("b")  # used: now the newest
    store.put("d", "D", 40)
    assert store.get("c") is None and store.get("b") == "B" and len(store) == 2


def test_a_record_larger_than_the_bound_is_refused_and_replacing_one_recounts_it():
    store = ResponseStore(max_bytes=100)
    assert not store.put("big", "x", 101) and store.get("big") is None and store.bytes == 0
    store.put("a", "old", 60)
    store.put("a", "new", 30)
    assert store.get("a") == "new" and store.bytes == 30


def test_records_expire_a_ttl_after_their_last_use():
    clock = Clock()
    store = ResponseStore(max_bytes=1000, ttl=10, clock=clock)
    store.put("a", "A", 1)
    store.put("b", "B", 1)
    clock.now = 8
    assert store.get("a") == "A"  # renewed until 18
    clock.now = 12
    assert store.get("b") is None and store.get("a") == "A" and store.bytes == 1
    clock.now = 30
    assert store.get("a") is None and store.bytes == 0 and len(store) == 0


def test_delete_says_whether_there_was_a_record():
    store = ResponseStore()
    store.put("a", "A", 5)
    assert store.delete("a") and not store.delete("a") and store.bytes == 0
