"""``tool_choice: "auto"`` decided as ``choose`` on a server that reports the likeliest next tokens.

The embedded model makes the choice inside its sampler, from the first step's raw logits
(llmproxy.backends._choice_sampling). A server such as llama.cpp's cannot be reached inside its sampler,
but it reports the likeliest tokens of a step with their log probabilities (``n_probs``). So the answer
is asked for in two requests: first one token with its likeliest alternatives (``probe``), which tell how
likely starting a call is against the likeliest other start; then the answer under the grammar chosen
from them (``chosen``): the calls grammar (with no repetition penalties: ``CALL_PENALTIES``), or the
grammar of text that holds no call (with a repeat penalty where none is set: ``TEXT_REPEAT_PENALTY``).
The server keeps the prompt it read for the first (llama.cpp's ``cache_prompt``), so the second reads
only what changed.

What the sampler adds on the embedded model and a server cannot give - the functions ranked by how likely
the request reads after each (llmproxy.backends._function_ranking), values held to the request's and a
list of calls followed - is left out: a call is to the function the request's words name best
(``GrammarChoice.words_best``), or where none does, to the one the model names; and it is one call: a
backend whose capabilities do not say ``follows_call_lists`` is planned for one (llmproxy.proxy). A
small model let write another call after its first writes the same one again, to the token limit: SmolLM2
on llama-server did so in 3 of the first 6 of BFCL's parallel cases (66 s a case), where the embedded
model's list continuation ends an answer at a call repeated (llmproxy.backends._list_continuation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from llmproxy.backends.base import CALL_PENALTIES, Completion, GenerationParams
from llmproxy.syntaxes.base import GrammarChoice

# The likeliest first tokens asked for. A call start that is not among them is taken to be as likely as the
# least likely of them: at most that, and a request whose words name a function can still earn the call.
PROBE_TOKENS = 20
# The repeat penalty of a text answer chosen here, where nothing set one: the embedded backend's default.
# llama-server's has been off since 2025, and SmolLM2 near temperature 0 then wrote a text answer over and
# over to the token limit in 14 of 200 BFCL cases. Calls get none (CALL_PENALTIES): a penalty on the tokens
# just read turns a value the request holds into another (simple_python 12/50 against 18/50 with it on calls).
TEXT_REPEAT_PENALTY = 1.1


def probe(params: GenerationParams) -> GenerationParams:
    """The request for the first token alone, with its likeliest alternatives and no constraint."""
    return replace(params, max_tokens=1, stop=(), grammar=None, lazy_grammar=None, choice_grammar=None,
                   json_schema=None, logprobs=PROBE_TOKENS)


def chosen(params: GenerationParams, probed: Completion) -> GenerationParams:
    """``params`` with its choice made from the probe's first step: the grammar of the answer chosen."""
    choice = params.choice_grammar
    if choice is None:
        raise ValueError("chosen() needs parameters that hold a choice")
    first = probed.logprobs[0].top if probed.logprobs else ()
    grammar = chosen_grammar(choice, first)
    samplers = params.samplers
    if grammar != choice.answer:
        samplers = {**samplers, **CALL_PENALTIES}
    elif "repeat_penalty" not in samplers:
        samplers = {**samplers, "repeat_penalty": TEXT_REPEAT_PENALTY}
    return replace(params, choice_grammar=None, lazy_grammar=None, grammar=grammar, samplers=samplers)


def chosen_grammar(choice: GrammarChoice, first: Sequence[tuple[str, float]]) -> str:
    """The calls or answer grammar of ``choice``, from the first step's likeliest tokens ``first``
    ((text, log probability) pairs); the answer where the server reported none."""
    margin = call_margin(first, choice.triggers)
    if margin + choice.words_bias + choice.call_bias <= 0:
        return choice.answer
    if len(choice.functions) == 1 or (choice.words_best is not None and choice.words_best < len(choice.functions)):
        return choice.functions[choice.words_best or 0].calls
    return choice.calls  # the model names the function


def call_margin(first: Sequence[tuple[str, float]], triggers: Sequence[str]) -> float:
    """How much likelier starting a call is (every listed token that starts one, together) than the
    likeliest other first token, in nats; minus infinity where nothing was listed."""
    if not first:
        return -math.inf
    floor = min(logprob for _, logprob in first)
    calls = [logprob for token, logprob in first if starts_call(token, triggers)]
    others = [logprob for token, logprob in first if not starts_call(token, triggers)]
    return _log_sum_exp(calls or [floor]) - max(others or [floor])


def starts_call(token: str, triggers: Sequence[str]) -> bool:
    """Whether a token's text starts a call: leading whitespace aside, the start of a trigger word or a
    text that begins with a whole one (as llmproxy.backends._choice_sampling.call_starts reads tokens)."""
    text = token.lstrip()
    return bool(text) and any(word.startswith(text) or text.startswith(word) for word in triggers)


def _log_sum_exp(values: Sequence[float]) -> float:
    peak = max(values)
    return peak + math.log(sum(math.exp(value - peak) for value in values)) if peak > -math.inf else peak
