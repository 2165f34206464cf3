"""Grammar-constrained sampling the way llama.cpp's server does it: draw first, mask only on a miss.

llama-cpp-python puts the grammar at the head of its sampler chain, so every token pays for matching
the grammar against the whole vocabulary (5-11 ms a token with SmolLM2's 49k tokens, about 40% of the
generation speed). Here the token is drawn from the ordinary chain and only that one token is checked;
when the grammar rejects it, the draw is redone over the grammar-masked vocabulary. The output is
exactly what the grammar admits, and the usual case - the model already follows it - costs almost
nothing.

A ``GrammarChoice`` in place of the grammar makes the first step a choice between two grammars, from
the model's raw logits (llmproxy.backends._choice_sampling), and a call to a known function then has
what is known of it proposed as a draft (llmproxy.backends._call_draft). A chosen call is drawn without
repetition penalties (``CALL_PENALTIES``), an answer in text with the settings' own.

The same class hands each sampled token, with the logits it was drawn from, to ``on_sample`` when one is
set: the embedded backend's logprobs, without llama-cpp-python's ``logits_all`` buffer (n_ctx x vocab).
It also keeps the tokens drawn (``drawn``), from which ``ending_text`` tells a generation that a stop
string ended from one that ended on an end-of-generation token: llama-cpp-python calls both "stop".
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import Llama, LlamaGrammar

from llmproxy.backends._asked_arguments import asked_enums
from llmproxy.backends._call_draft import CallDraft, CallStyle
from llmproxy.backends._choice_sampling import ChoosingSampler, call_starts
from llmproxy.backends._function_ranking import FunctionRanker, Judgement
from llmproxy.backends._list_continuation import ListContinuation, ListTokens
from llmproxy.backends._value_grounding import ArgumentKinds, GroundingTokens, ValueGrounding
from llmproxy.backends.base import CALL_PENALTIES
from llmproxy.syntaxes.base import GrammarChoice

_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)])  # llama_token_data


class GrammarCheckedLlama(Llama):
    """``Llama`` whose grammar sampling draws first and masks only when the draw is not allowed."""

    # Set by a caller holding the model's lock. Not a ``logits_processor``: that one is not told the token
    # drawn, and on a grammar miss it runs a second time, over the masked logits.
    on_sample: Callable[[int, np.ndarray], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drawn: list[int] = []  # every token drawn since a caller holding the lock last emptied it
        self._pieces: list[str] | None = None  # each token's text, read when a choice first needs it
        self._starts: dict[tuple[str, ...], np.ndarray] = {}
        self._ranker: FunctionRanker | None = None
        self._list_tokens: dict[str, ListTokens] = {}  # what each token does to calls that more may follow
        self._grounding_tokens: GroundingTokens | None = None  # the vocabulary as the grounding looks it up
        self._call_style = CallStyle()  # how this model spaces its calls, for the drafts of the next

    def ending_text(self) -> bytes | None:
        """The text of the tokens drawn, as llama-cpp-python matches stop strings against it; None when
        the last one was end-of-generation (a grammar's end is one), so no stop string ended the answer."""
        if not self.drawn or llama_cpp.llama_vocab_is_eog(self._model.vocab, self.drawn[-1]):
            return None
        return self.detokenize(self.drawn)

    def sample(self, *args: Any, idx: int | None = None, **kwargs: Any) -> int:
        token = super().sample(*args, idx=idx, **kwargs)
        self.drawn.append(token)
        if self.on_sample is not None:
            # The samplers work on a copy: these are still the model's raw logits for this step.
            row = -1 if idx is None else idx - self.n_tokens
            logits = llama_cpp.llama_get_logits_ith(self._ctx.ctx, row)
            self.on_sample(token, np.ctypeslib.as_array(logits, shape=(self.n_vocab(),)))
        return token

    def eval(self, tokens: Sequence[int]) -> None:
        draft = self.draft_model
        if not isinstance(draft, CallDraft) or not draft.proposed:
            super().eval(tokens)
            return
        # The token drawn and a draft after it: every place's logits are sampled from, to check the draft.
        draft.proposed = 0
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        self._batch.set_batch(batch=tokens, n_past=self.n_tokens, logits_all=True)
        self._ctx.decode(self._batch)
        self.input_ids[self.n_tokens:self.n_tokens + len(tokens)] = tokens
        self.n_tokens += len(tokens)
        self._requires_eval = False

    def _init_sampler(self, *args: Any, grammar: LlamaGrammar | GrammarChoice | None = None, **kwargs: Any) -> Any:
        chain = super()._init_sampler(*args, grammar=None, **kwargs)
        self.draft_model = None  # a draft belongs to one generation
        if grammar is None:
            return chain
        if isinstance(grammar, GrammarChoice):  # passed through create_completion's grammar argument
            call_chain = super()._init_sampler(*args, grammar=None, **{**kwargs, **CALL_PENALTIES})
            sampler = ChoosingSampler(
                grammar, self._call_starts(grammar.triggers), chain,
                lambda text, chosen: _DrawFirstSampler(chosen, self._model.vocab, text, self.n_vocab()),
                self._judge_functions, self._list_continuation, self._value_grounding, call_chain)
            self.draft_model = CallDraft(
                lambda: sampler.function, self.detokenize,
                lambda text: self.tokenize(text.encode("utf-8"), add_bos=False, special=False), self._call_style)
            return sampler
        return _DrawFirstSampler(chain, self._model.vocab, grammar._grammar, self.n_vocab())

    def _list_continuation(self, choice: GrammarChoice) -> ListContinuation:
        """What follows a chosen answer's list of calls, with this model's tokens (read once)."""
        tokens = self._list_tokens.get(choice.separator)
        if tokens is None:
            vocab = self._model.vocab
            ends = {token for token in range(self.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, token)}
            tokens = self._list_tokens[choice.separator] = ListTokens.of(self._pieces, ends, choice.separator)
        kinds = ArgumentKinds.of(choice.functions)
        return ListContinuation(tokens, self._pieces, choice.request, choice.continue_bias, choice.asked_functions,
                                len(choice.functions), asked_enums(choice.request, kinds.choices()), kinds.orders)

    def _value_grounding(self, choice: GrammarChoice) -> ValueGrounding:
        """What holds a chosen call's values to its request, with this model's tokens (looked up once)."""
        if self._grounding_tokens is None:
            self._grounding_tokens = GroundingTokens.of(self._pieces)
        return ValueGrounding(self._grounding_tokens, self._pieces, choice.request, choice.grounding_bias,
                              choice.asked_functions, ArgumentKinds.of(choice.functions), self._split)

    def _split(self, text: str) -> list[str]:
        """The pieces this model's tokenizer writes ``text`` in."""
        return [self._pieces[token] for token in self.tokenize(text.encode("utf-8"), add_bos=False, special=False)]

    def _judge_functions(self, choice: GrammarChoice) -> Judgement:
        """The choice's function that its request is for, and how relevant it is, by a ranker loaded on first
        use."""
        if self._ranker is None:
            self._ranker = FunctionRanker(self._model, self.n_threads)
        return self._ranker.judge(choice.request, [(f.name, f.description) for f in choice.functions])

    def close(self) -> None:
        ranker = getattr(self, "_ranker", None)  # not there when loading the model failed
        if ranker is not None:
            ranker.close()
            self._ranker = None
        super().close()

    def _call_starts(self, triggers: tuple[str, ...]) -> np.ndarray:
        """Which tokens start a call (llmproxy.backends._choice_sampling.call_starts), worked out once per
        set of trigger words: it reads the whole vocabulary."""
        if triggers not in self._starts:
            if self._pieces is None:
                self._pieces = [self.detokenize([token], special=True).decode("utf-8", errors="ignore")
                                for token in range(self.n_vocab())]
            self._starts[triggers] = call_starts(self._pieces, triggers)
        return self._starts[triggers]


class _DrawFirstSampler:
    """Stands in for llama-cpp-python's ``LlamaSampler``: ``sample(ctx, idx)`` returns a token that the
    grammar ``text`` accepts."""

    def __init__(self, chain: Any, vocab: Any, text: str, n_vocab: int) -> None:
        self._chain = chain  # owns the ordinary samplers (penalties, top-k/p, temperature, dist)
        self._rules = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), b"root")
        if not self._rules:
            raise ValueError("llama.cpp rejected the grammar")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._every = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._every["id"] = np.arange(n_vocab)

    def _candidates(self, ctx: Any, idx: int) -> llama_cpp.llama_token_data_array:
        logits = llama_cpp.llama_get_logits_ith(ctx.ctx, idx)
        self._every["logit"] = np.ctypeslib.as_array(logits, shape=(len(self._every),))
        self._every["p"] = 0.0
        self._every["id"] = np.arange(len(self._every))  # a previous pass may have sorted the array
        data = self._every.ctypes.data_as(llama_cpp.llama_token_data_p)
        return llama_cpp.llama_token_data_array(data, len(self._every), -1, False)

    def _allowed(self, token: int) -> bool:
        self._one[0] = llama_cpp.llama_token_data(token, 0.0, 0.0)
        single = llama_cpp.llama_token_data_array(self._one, 1, -1, False)
        llama_cpp.llama_sampler_apply(self._rules, ctypes.byref(single))
        return self._one[0].logit != float("-inf")

    def sample(self, ctx: Any, idx: int = -1) -> int:
        candidates = self._candidates(ctx, idx)
        llama_cpp.llama_sampler_apply(self._chain.sampler, ctypes.byref(candidates))
        token = int(candidates.data[candidates.selected].id)
        if not self._allowed(token):
            candidates = self._candidates(ctx, idx)
            llama_cpp.llama_sampler_apply(self._rules, ctypes.byref(candidates))
            llama_cpp.llama_sampler_apply(self._chain.sampler, ctypes.byref(candidates))
            token = int(candidates.data[candidates.selected].id)
        # Both learn the token actually chosen (penalties, and the grammar's position).
        llama_cpp.llama_sampler_accept(self._chain.sampler, token)
        llama_cpp.llama_sampler_accept(self._rules, token)
        return token

    def close(self) -> None:
        if self._rules:
            llama_cpp.llama_sampler_free(self._rules)
            self._rules = None
        self._chain.close()

    def __del__(self) -> None:
        self.close()
