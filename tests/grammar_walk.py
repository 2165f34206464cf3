"""llama.cpp's own grammar sampler as a matcher and a random generator, for tests of grammars.

``accepts(grammar, text)`` asks the sampler token by token; ``sample(grammar, rng)`` walks the grammar at
random over single characters and a few words, so tests can check what a grammar admits against a
JSON schema without any model.
"""

from __future__ import annotations

import ctypes
import functools
import random

import llama_cpp
import numpy as np

from llmproxy.grammar import _validation, validate_grammar


@functools.cache
def _vocab():
    """The vocabulary the grammars are checked with, looked up once: each lookup searches sys.path for the
    bundled model, which took most of a walk's time."""
    return _validation._vocab()


def tokenize(text: str) -> list[int]:
    data = text.encode()
    buf = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(_vocab(), data, len(data), buf, len(buf), False, False)
    assert n >= 0
    return list(buf[:n])


def piece(token: int) -> bytes:
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(_vocab(), token, buf, 64, 0, False)
    return buf.raw[:n]


class Walker:
    """A llama.cpp grammar sampler; accepting a token it forbids would abort the process, so always ask first."""

    def __init__(self, text: str) -> None:
        validate_grammar(text)
        self.sampler = llama_cpp.llama_sampler_init_grammar(_vocab(), text.encode(), b"root")

    def allowed(self, tokens: list[int]) -> list[int]:
        data = np.zeros(len(tokens), dtype=[("id", np.intc), ("logit", np.single), ("p", np.single)])
        data["id"] = tokens
        array = llama_cpp.llama_token_data_array(data.ctypes.data_as(llama_cpp.llama_token_data_p), len(tokens), -1, False)
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        return data["id"][np.isfinite(data["logit"])].tolist()

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.sampler, token)

    def admits(self, tokens: list[int]) -> bool:
        """Whether the grammar, from here, takes ``tokens`` in a row (tried on a copy)."""
        trial = Walker.__new__(Walker)
        trial.sampler = llama_cpp.llama_sampler_clone(self.sampler)
        for token in tokens:
            if not trial.allowed([token]):
                return False
            trial.accept(token)
        return True

    def __del__(self) -> None:
        llama_cpp.llama_sampler_free(self.sampler)


def eos() -> int:
    return llama_cpp.llama_vocab_eos(_vocab())


def accepts(text_grammar: str, text: str) -> bool:
    walker = Walker(text_grammar)
    for token in tokenize(text):
        if not walker.allowed([token]):
            return False
        walker.accept(token)
    return bool(walker.allowed([eos()]))


_ALPHABET = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "日", "🎉", '":', "true", "false", "null", ' "']
CLOSERS = {b'"', b"}", b"]"}


@functools.cache
def _pieces(literals: str) -> dict[int, bytes]:
    """The tokens of single characters (those of ``literals`` too) and a few words, and their bytes."""
    return {t: piece(t) for s in sorted({*_ALPHABET, *literals}) for t in tokenize(s)}  # sorted: no hash-seed luck


def sample(text_grammar: str, rng: random.Random, literals: str = "", limit: int = 3000,
           words: tuple[str, ...] = ()) -> str:
    """A random text the grammar admits: walk it over single characters (those of ``literals`` too)
    and a few words, pushing towards closing quotes and brackets as the text grows so the walk ends.
    ``words`` (markers such as ``</think>``) are tried whole now and then, where the grammar allows
    them: a walk over single characters would almost never spell one."""
    pieces = _pieces(literals)
    candidates, end = [*pieces, eos()], eos()
    walker, out = Walker(text_grammar), b""
    for step in range(limit):
        word = rng.choice(words) if words and rng.random() < (0.5 if step > 100 else 0.1) else None
        if word is not None and walker.admits(tokenize(word)):
            for token in tokenize(word):
                walker.accept(token)
            out += word.encode()
            continue
        ok = walker.allowed(candidates)
        if end in ok and (len(ok) == 1 or rng.random() < 0.5):
            return out.decode()
        ok = [t for t in ok if t != end]
        pressure = 40 if step > 150 else 3
        token = rng.choices(ok, [pressure if pieces[t] in CLOSERS else 1 for t in ok])[0]
        walker.accept(token)
        out += pieces[token]
    raise AssertionError(f"random walk did not finish: {out[:200]!r}")
