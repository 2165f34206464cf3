"""How ``tool_choice: "auto"`` is decided on a route: ``free`` or ``choose``.

- ``free``: the model writes text or a call as it likes; the call grammar applies from its trigger
  word on. Models that know tools decide well this way.
- ``choose``: the answer's first step is a choice between calling and answering, made from the model's
  own probabilities, and everything after it is constrained: a call by the call grammar (to the function
  the model ranks first for the request where several are offered, ``ranked_choice``), an answer by a
  grammar for text that holds no call. A small model that
  is asked whether to call writes text almost every time - SmolLM2-135M called in 3 of the 24 answers
  of the decision eval that needed a call, under ``free`` - yet how likely it finds starting a call rises
  sharply when a tool fits the request. So the call is chosen when that likelihood, raised by
  ``CALL_BIAS``, beats the likeliest other start. Right after the results of its own calls the turn is an
  answer: a small model shown its call and the result calls again, and an agent's loop would never end.

``choose`` needs a backend that reads the model's probabilities - the embedded model while it samples,
or a server that reports the first step's likeliest tokens (llama.cpp), asked for them in a request of
their own first (llmproxy.backends._probed_choice) - and a syntax whose calls start at trigger words; it
leaves alone what is not an open decision (``none``, ``required``, a named function, wrappers that always
call) and requests whose text answer must be JSON (``response_format``), where both ways start the same.
The default is ``choose`` on the bundled SmolLM2 (in-process, or its GGUF served by llama.cpp), where the
decision eval measured it deciding far better (``llmproxy eval decisions``), and ``free`` everywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from llmproxy.backends import backends_with
from llmproxy.common.asks_for_several import asks_for_several
from llmproxy.common.word_overlap import content_words, word_overlap
from llmproxy.errors import ConfigurationError, InvalidRequestError
from llmproxy.second_chance_note import is_second_chance_note
from llmproxy.syntaxes.base import ChoosableFunction
from llmproxy.types import FunctionCall, FunctionMessage, ToolMessage, UserMessage, content_text

if TYPE_CHECKING:
    from llmproxy.backends.base import Backend
    from llmproxy.prompts import Wrapper
    from llmproxy.syntaxes.base import AnswerShape, CallMode, CallSyntax, Decide, GrammarChoice
    from llmproxy.types import ChatRequest, FunctionDefinition

DecideMode = Literal["free", "choose"]
DECIDE_MODES: tuple[DecideMode, ...] = ("free", "choose")
# Nats added to the log-probability of starting a call before it is compared with the likeliest other
# start (a factor of e**2.75, about 16). Calibrated on SmolLM2-135M over 20 requests kept apart from the
# eval's (bench/decide_calibration.py): the split that decided most of them right; then lowered from 3 with
# the relevance terms below, which keep those 20 and the eval's decisions as they were.
CALL_BIAS = 2.75
# Where the first step leans to text, a request that the best offered function explains well still gets a
# call: the bias is then RELEVANCE_WEIGHT times how far the function's relevance (how much likelier the
# request reads after its line than after one naming no function, in nats) is above RELEVANCE_FLOOR, where
# that is more than CALL_BIAS. Calibrated on 339 requests of BFCL's non-live categories (simple, multiple,
# parallel, parallel_multiple: a call is asked; irrelevance: none fits; three samples, seeds 1, 7 and 34):
# calls chosen in 188 of the 243 that ask for one (142 by the first step with a bias of 3 alone), text kept
# in 82 of the 96 that do not (78 with a bias of 3 alone); the eval's and decide_calibration's decisions as
# they were.
RELEVANCE_WEIGHT = 0.3
RELEVANCE_FLOOR = 5.0
# The request's own words move the call's bias too (llmproxy.common.word_overlap): by these many nats for
# all of the best function's name words (description words, parameter-name words) in the request, from
# WORDS_OFFSET for none. Fitted on the same 339 requests, cross-checked by fitting on one seed's sample and
# deciding the other's: 93 % and 91 % decided right (with the terms above alone: 83 % and 77 %); on all
# 339, calls chosen in 230 of the 243 that ask for one, text kept in 86 of the 96 that do not.
NAME_WORDS_WEIGHT = 8.0
DESCRIPTION_WORDS_WEIGHT = 6.0
PARAMETER_WORDS_WEIGHT = 4.0
WORDS_OFFSET = -5.0
# A request that says it asks for several things ("... respectively", "Also, ...") gets this many nats more:
# such requests want calls (of BFCL's non-live requests, 2 of the 240 irrelevance ones that ask for none say
# so, and 69 of the 645 simple_python, multiple and parallel ones that ask for calls; with the bias before
# it, those 2 leaned to text by 11 and 8.5 nats, and 11 of the 69 did, 10 of them by less than 5).
SEVERAL_BIAS = 5.0
# After each call of a chosen answer that more calls may follow, another follows while numbers the request
# writes are in no call yet (llmproxy.backends._list_continuation); where it writes none, where the model's
# own margin for going on (over ending the answer) plus CONTINUE_BIAS is above zero. Calibrated on 57
# requests of BFCL's non-live categories, after the model's own first call: the right choice in 43 (the
# model's own margin alone, which ends after one call almost every time: 36).
CONTINUE_BIAS = 5.0
# Where several functions are offered and several calls may follow one another, a request that says it
# asks for several things (llmproxy.backends._list_continuation) asks for a call to each function its words
# name at least ASKED_FLOOR and at least ASKED_SHARE of the best-named one's score (words_scores).
# Measured on BFCL's 200 multiple and 200 parallel_multiple requests: of those that say so, every function
# asked for qualifies in 153 of 159 parallel_multiple ones, and a function not asked for in 9 of the 20
# multiple ones (one call asked for).
ASKED_FLOOR = 3.0
ASKED_SHARE = 0.3
# A value of a chosen call begun as the request writes one goes on as it does, by this many nats
# (llmproxy.backends._value_grounding).
GROUNDING_BIAS = 4.0
# Up to this many offered functions are ranked once a call is chosen (each costs the model a read of the
# request, llmproxy.backends._function_ranking); past it the model names the function in the call.
MAX_RANKED_FUNCTIONS = 16


def check_decide(decide: str | None) -> DecideMode | None:
    """``decide`` as given (None: the route's default), or an error naming the modes."""
    if decide is not None and decide not in DECIDE_MODES:
        raise InvalidRequestError(f"decide must be one of {', '.join(DECIDE_MODES)}, not {decide!r:.60}",
                                  param="decide")
    return decide


def route_decide(decide: DecideMode | None, backend: Backend, wrapper: Wrapper, grammar: str, *,
                 bundled: bool) -> DecideMode:
    """The mode of a route: ``decide`` where given (checked to be possible there), else ``choose`` where
    the route can and serves the bundled model (``bundled``), else ``free``."""
    problem = _cannot_choose(backend, wrapper, grammar)
    if decide == "choose" and problem:
        raise ConfigurationError(f"decide 'choose' is not possible here: {problem}; use decide 'free'")
    if decide is not None:
        return decide
    return "choose" if bundled and not problem else "free"


def _cannot_choose(backend: Backend, wrapper: Wrapper, grammar: str) -> str | None:
    spec = wrapper.spec
    if not backend.capabilities.choice_grammar:
        return (f"the {backend.name} backend does not choose from the model's probabilities "
                f"({', '.join(backends_with('choice_grammar'))} does)")
    if grammar != "auto":
        return f"the answer must be constrained by the generated grammar, and grammar is {grammar!r}"
    if spec.call != "optional":
        return f"the wrapper {spec.name!r} leaves the model no choice ({spec.call} call)"
    if spec.syntax is None or not spec.syntax.can_choose:
        return f"the {spec.syntax.name if spec.syntax else 'plain'} call syntax cannot be decided as a choice"
    if spec.reasoning is not None:
        return f"the wrapper {spec.name!r} reasons before it answers, so its first step is no choice"
    return None


def request_decide(mode: DecideMode, request: ChatRequest, call: CallMode) -> Decide:
    """How this request's optional call is decided on a route whose mode is ``mode``."""
    if call != "optional" or mode != "choose":
        return "free"
    if request.response_format is not None and request.response_format.type != "text":
        return "free"  # a JSON answer starts as a call does: the first step would tell nothing
    if request.messages and isinstance(request.messages[-1], (ToolMessage, FunctionMessage)):
        return "answer"
    return "choose"


def ranked_choice(choice: GrammarChoice, shape: AnswerShape, request: ChatRequest) -> GrammarChoice:
    """``choice`` with what is known of a call before it is written: each offered function's own calls
    grammar and opening (what the syntax writes before the arguments), and the text of the request
    (its last user message) that several functions are ranked by once a call is chosen; as it was where
    there are more than ``MAX_RANKED_FUNCTIONS``, or several and no request text: the model names the
    function then."""
    functions = shape.definitions
    asked = _request_text(request)
    if len(functions) > MAX_RANKED_FUNCTIONS or (len(functions) > 1 and not asked):
        return choice
    known = tuple(
        ChoosableFunction(f.name, f.description or "",
                          shape.syntax.grammar(replace(shape, call="required", first=f.name, decide="free")).text,
                          _opening(shape.syntax, f.name), f.parameters)
        for f in functions)
    several = shape.parallel and getattr(shape.syntax, "lists_calls", False)
    separator = (getattr(shape.syntax, "call_separator", None) or "") if several else ""
    if not asked:
        return replace(choice, functions=known, separator=separator)
    scores = words_scores(asked, functions)
    best = max(scores)
    named = scores.index(best) if best > 0 and scores.count(best) == 1 else None
    also = asked_functions(functions, scores) if separator and len(functions) > 1 else ()
    return replace(choice, functions=known, request=asked, separator=separator,
                   words_bias=best + WORDS_OFFSET + several_bias(asked), words_best=named, asked_functions=also)


def asked_functions(functions: Sequence[FunctionDefinition], scores: Sequence[float]) -> tuple[str, ...]:
    """The names of the ``functions`` whose ``words_scores`` are high enough that a request asking for
    several things asks for a call to each."""
    floor = max(ASKED_FLOOR, ASKED_SHARE * max(scores))
    return tuple(function.name for function, score in zip(functions, scores) if score >= floor)


def words_bias(request: str, functions: Sequence[FunctionDefinition]) -> float:
    """The bias a call gets from the request's words: how much of the best-named function they hold, and
    whether they ask for several things (``several_bias``)."""
    return max(words_scores(request, functions)) + WORDS_OFFSET + several_bias(request)


def several_bias(request: str) -> float:
    """``SEVERAL_BIAS`` where the request says it asks for several things (llmproxy.common.asks_for_several:
    "respectively", "also", "then" ...), else 0."""
    return SEVERAL_BIAS if asks_for_several(request) else 0.0


def words_scores(request: str, functions: Sequence[FunctionDefinition]) -> list[float]:
    """How much of each function's name, description and parameter names the request's words hold,
    weighed as the call's bias weighs them (0 for none)."""
    asked = content_words(request)

    def score(function: FunctionDefinition) -> float:
        properties = function.parameters.get("properties")
        overlap = word_overlap(asked, function.name, function.description or "",
                               properties if isinstance(properties, dict) else ())
        return (NAME_WORDS_WEIGHT * overlap.name + DESCRIPTION_WORDS_WEIGHT * overlap.description
                + PARAMETER_WORDS_WEIGHT * overlap.parameters)

    return [score(function) for function in functions]


def _opening(syntax: CallSyntax, name: str) -> str:
    """What every call to ``name`` opens with as ``syntax`` writes calls: where two of them, with other
    arguments, part."""
    empty, other = (syntax.render_turn("", [FunctionCall(name=name, arguments=arguments)]).calls[0]
                    for arguments in ("{}", '{"a": 1}'))
    return os.path.commonprefix([empty, other])


def _request_text(request: ChatRequest) -> str:
    """The request's last user message, as the client wrote it (a second chance's note is llmproxy's)."""
    for message in reversed(request.messages):
        if isinstance(message, UserMessage) and not is_second_chance_note(message):
            return (content_text(message.content) or "").strip()
    return ""
