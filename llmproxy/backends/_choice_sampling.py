"""The embedded model's first step as a choice between calling and answering (``GrammarChoice``).

``tool_choice: "auto"`` decided as ``choose`` (llmproxy.decide) comes here as two grammars: one for an
answer that calls, one for an answer in text. Before the first token is drawn, the model's raw
logits say how likely it is to start a call - every token that begins one of the call's trigger words,
together - and how likely its favourite other start is. The call wins when the first, raised by the
choice's bias, is the greater; from then on the answer is sampled under the chosen grammar, as any
grammar is. A small model leans to text even where a request plainly asks for a call, so where its first
step leans that way, the bias grows with how well the best offered function explains the request (its
relevance, llmproxy.backends._function_ranking); and it moves with how much of an offered function the
request names in its own words (llmproxy.decide.words_bias). Where several functions are offered, a call
is to the one the model ranks first for the request (llmproxy.backends._function_ranking). The choice reads the raw logits, so it does not
depend on the seed or the temperature: the same conversation is decided the same way every time.

Once the function is known, so is much of its call: llmproxy.backends._call_draft proposes it as a draft.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from llmproxy.backends._function_ranking import Judgement
from llmproxy.backends._list_continuation import ListContinuation
from llmproxy.backends._probed_choice import starts_call
from llmproxy.backends._value_grounding import ValueGrounding
from llmproxy.syntaxes.base import ChoosableFunction, GrammarChoice


def call_starts(pieces: Sequence[str], triggers: Sequence[str]) -> np.ndarray:
    """Which tokens (by their text, ``pieces``) start a call: leading whitespace aside, a token that is
    the start of a trigger word (``{``, ``{"`` for ``{"name"``) or begins with a whole one."""
    return np.array([starts_call(piece, triggers) for piece in pieces], dtype=bool)


def call_margin(logits: np.ndarray, starts: np.ndarray) -> float:
    """How much likelier starting a call is (the tokens in ``starts`` together) than the likeliest other
    first token, in nats, from a step's raw ``logits``; minus infinity where no token starts one."""
    if not starts.any():
        return float("-inf")
    call = logits[starts]
    peak = float(call.max())
    call_logit = peak + float(np.log(np.exp(call - peak).sum()))  # log-sum-exp: softmax's denominator cancels
    return call_logit - float(logits[~starts].max())


def chooses_call(logits: np.ndarray, starts: np.ndarray, call_bias: float) -> bool:
    """Whether an answer whose first step has ``logits`` calls: its call margin raised by ``call_bias``
    is above zero."""
    return call_margin(logits, starts) + call_bias > 0


def relevance_bias(choice: GrammarChoice, relevance: float) -> float:
    """The bias a call gets where the best function's relevance to the request is ``relevance``: the
    choice's own, or more for a request that function explains well."""
    return max(choice.call_bias, choice.relevance_weight * (relevance - choice.relevance_floor))


class ChoosingSampler:
    """Stands in for llama-cpp-python's ``LlamaSampler``: at the first ``sample`` it chooses the choice's
    calls or answer grammar from the raw logits, and samples under it from then on (``make`` builds the
    sampler of a grammar's text, which takes over the ordinary samplers it is given: ``chain`` for an
    answer, ``call_chain`` for a call, where the two differ)."""

    def __init__(self, choice: GrammarChoice, starts: np.ndarray, chain: Any, make: Callable[[str, Any], Any],
                 judge: Callable[[GrammarChoice], Judgement],
                 listing: Callable[[GrammarChoice], ListContinuation] | None = None,
                 grounding: Callable[[GrammarChoice], ValueGrounding] | None = None, call_chain: Any = None) -> None:
        self._choice = choice
        self._starts = starts
        self._chains = {False: chain, True: chain if call_chain is None else call_chain}  # by whether it calls
        self._make = make
        self._judge = judge  # the request's best function and its relevance (llmproxy.backends._function_ranking)
        self._judged: Judgement | None = None
        self._listing = listing  # follows a list of calls (llmproxy.backends._list_continuation)
        self._grounding = grounding  # holds a call's values to the request's (llmproxy.backends._value_grounding)
        self._sampler: Any = None  # the chosen grammar's, from the first step on
        self.list: ListContinuation | None = None  # where more calls may follow the chosen one
        self.values: ValueGrounding | None = None  # where a call was chosen and its request is known
        self.called: bool | None = None  # what was chosen, once it has been
        self.function: ChoosableFunction | None = None  # what a chosen call is to, where that is known

    def sample(self, ctx: Any, idx: int = -1) -> int:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, idx), shape=(len(self._starts),))
        if self._sampler is None:
            self.called = self._calls(logits)
            chain = self._chains.pop(self.called)
            self._close_chains(keep=chain)  # the other outcome's, where it has its own
            self._sampler = self._make(self._chosen_grammar(), chain)
            if self.called and self._choice.request and self._grounding is not None:
                self.values = self._grounding(self._choice)
            if self.function is not None and self._choice.separator and self._listing is not None:
                self.list = self._listing(self._choice)
        followers = [follower for follower in (self.values, self.list) if follower is not None]
        for follower in followers:  # in place: the grammar's sampler reads the same logits
            follower.adjust(logits)
        token = self._sampler.sample(ctx, idx)
        for follower in followers:
            follower.accept(token)
        return token

    def _calls(self, logits: np.ndarray) -> bool:
        """Whether the answer calls: by its first step alone where that leans to a call; else with the bias
        the request's relevance to the best function earns, where the functions can be judged."""
        choice = self._choice
        margin = call_margin(logits, self._starts) + choice.words_bias
        if margin + choice.call_bias > 0:
            return True
        if not (choice.relevance_weight and choice.request and choice.functions):
            return False
        return margin + relevance_bias(choice, self._judgement().relevance) > 0

    def _judgement(self) -> Judgement:
        if self._judged is None:
            self._judged = self._judge(self._choice)
        return self._judged

    def _chosen_grammar(self) -> str:
        choice = self._choice
        if not self.called:
            return choice.answer
        if not choice.functions:
            return choice.calls  # the model names the function
        self.function = choice.functions[self._judgement().best if len(choice.functions) > 1 else 0]
        return self.function.calls

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
        self._close_chains()  # those never handed on

    def _close_chains(self, keep: Any = None) -> None:
        for chain in {id(chain): chain for chain in self._chains.values()}.values():
            if chain is not None and chain is not keep:
                chain.close()
        self._chains = {}

    def __del__(self) -> None:
        self.close()
