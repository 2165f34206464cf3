"""The call-syntax seam: one way of writing function calls in a model's output, as a small protocol.

A *call syntax* is how a model family writes a call: MemGPT's ``{"function", "params"}`` object,
OpenAI-style ``{"name", "arguments"}`` JSON, Hermes's ``<tool_call>`` tags, and so on. Each is one
module in this package implementing ``CallSyntax``; a wrapper's TOML names it (``[answer] syntax``).

For each request the syntax makes an ``AnswerShape``: the one value that says everything about the
expected answer - whether a call is required, which functions it may call, how many calls, the text
the prompt ends with (the *prefix*, which the answer continues) and the point in the syntax that
prefix leaves the answer at (the *stage*), and the family's reasoning block. The history renderer,
the grammar builder, the parser and the stream scanner all read that value; none re-derives it.

Most syntaxes have a *call section*: free text (the answer's content) may come first, and the calls
start at one of the syntax's *trigger* words (``<tool_call>``, ``[TOOL_CALLS]``...). Where a call is
optional the grammar is lazy: free text until a trigger, then the constrained calls.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from llmproxy.types import FunctionCall, FunctionDefinition

CallMode = Literal["required", "optional", "text"]
# How an optional call is decided (llmproxy.decide): "free" - the model writes text or calls as it likes;
# "choose" - its first step is a choice between calling and answering (``GrammarChoice``); "answer" - it
# answers in text (``choose``, right after the results of its own calls).
Decide = Literal["free", "choose", "answer"]


@dataclass(frozen=True)
class Call:
    """One call the model made: a function name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """What the model said: content, the calls it made, its reasoning, and the repairs that were needed."""

    content: str | None
    calls: tuple[Call, ...] = ()
    repairs: tuple[str, ...] = ()
    reasoning: str | None = None


@dataclass(frozen=True)
class Reasoning:
    """A family's reasoning block (``<think>``...``</think>``); ``opened``: the prompt ends inside one."""

    open: str = "<think>"
    close: str = "</think>"
    opened: bool = False


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar for the answer (what follows the prompt's prefix); ``label`` names it for logs.

    ``text`` constrains the whole answer and suits every backend that takes GBNF. When the calls are
    optional it admits free text until a trigger word; ``lazy`` then holds the same constraint in the
    form llama.cpp's server takes (``grammar_lazy``): a grammar that starts at a trigger word, the
    trigger words, and the special tokens the calls are written with.
    """

    text: str
    label: str = "generated"
    lazy: LazyGrammar | None = None
    choice: GrammarChoice | None = None


@dataclass(frozen=True)
class LazyGrammar:
    text: str
    triggers: tuple[str, ...]
    preserved_tokens: tuple[str, ...] = ()


@dataclass(frozen=True)
class GrammarChoice:
    """The same constraint as the whole-answer grammar, for a backend that makes the answer's first step
    a choice between calling and answering from the model's own probabilities (the embedded model).

    ``calls`` constrains an answer that calls, ``answer`` one that answers in text. The answer calls when
    the probability of the likeliest way to start a call (a token that begins one of ``triggers``),
    raised by a bias (in nats), beats that of the likeliest other first token. The bias is ``call_bias``,
    or, where that is more, ``relevance_weight`` times how far the best function's relevance to the
    request (llmproxy.backends._function_ranking) is above ``relevance_floor``; either way raised by
    ``words_bias``, which the request's own words earn (llmproxy.decide.words_bias; below zero where they
    name none of what any function is for).
    """

    calls: str
    answer: str
    triggers: tuple[str, ...]
    call_bias: float = 0.0
    relevance_weight: float = 0.0
    relevance_floor: float = 0.0
    words_bias: float = 0.0
    # Where a chosen answer's calls are bare JSON objects that more may follow, what stands between two
    # (llmproxy.backends._list_continuation decides after each whether another follows), and the bias of
    # going on where the request's numbers do not decide.
    separator: str = ""
    continue_bias: float = 0.0
    # A chosen call's value begun as the request writes one: the tokens that go on as it does are raised by
    # this many nats (llmproxy.backends._value_grounding).
    grounding_bias: float = 0.0
    # Where the function a call is to can be known before the call is written: each offered function's own
    # calls grammar, and, where there are several, the request they are ranked by once a call is chosen
    # (llmproxy.backends._function_ranking); the call is then to the best.
    functions: tuple[ChoosableFunction, ...] = ()
    request: str = ""
    # Which of ``functions`` the request's words name best, where one is named more than every other
    # (llmproxy.decide.words_scores): the function of a call chosen on a server, which cannot rank them.
    words_best: int | None = None
    # Where several calls may follow one another, the offered functions the request's words name well
    # enough that a request asking for several things asks for a call to each (llmproxy.decide.
    # asked_functions): the list goes on while one is not called yet, and a later call names one of those.
    asked_functions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChoosableFunction:
    """One offered function as ``GrammarChoice`` ranks it: what it is for, the grammar of calls to it, the
    text such a call opens with as the syntax writes calls (up to its arguments), and the JSON schema of
    its arguments (whose keys the grammar asks for in order)."""

    name: str
    description: str
    calls: str
    opening: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnswerShape:
    """The expected answer of one request, decided when the request is rendered.

    ``allowed`` are the names the answer may call (every offered function, or the one that
    ``tool_choice`` names); ``forced`` is set when the prefix itself already names the function.
    ``stage`` is syntax-defined: where in the syntax the prompt's ``prefix`` leaves the answer.
    """

    syntax: CallSyntax | None
    call: CallMode
    functions: tuple[FunctionDefinition, ...] = ()
    allowed: tuple[str, ...] = ()
    parallel: bool = False
    prefix: str = ""
    stage: str = "start"
    forced: str | None = None
    reasoning: Reasoning | None = None
    decide: Decide = "free"  # how an optional call is decided (set for syntaxes that can_choose)
    # A call chosen to be to this function (llmproxy.decide): the answer's first call is to it, and where
    # the syntax lists calls, later ones may follow, to any allowed function.
    first: str | None = None

    @property
    def definitions(self) -> tuple[FunctionDefinition, ...]:
        """The definitions of the functions the answer may call, in the request's order."""
        return tuple(f for f in self.functions if f.name in self.allowed)


@dataclass(frozen=True)
class TurnText:
    """A past assistant turn as a syntax writes it: visible ``text`` and the ``calls`` as text."""

    text: str
    calls: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class CallPiece:
    """A piece of a call being streamed: ``name`` opens call number ``index``; ``arguments`` continues
    that call's arguments, as the response will write them (``json.dumps``)."""

    index: int
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class Streamed:
    """What a piece of a streamed answer adds to the answer's content, its reasoning and its calls.
    Slotted and not frozen: one is made for every token a server relays (``StreamDelta``'s reason)."""

    content: str = ""
    reasoning: str = ""
    calls: tuple[CallPiece, ...] = ()


NOTHING = Streamed()  # a piece that adds nothing (yet)


class Scanner(Protocol):
    """Reads a streamed answer piece by piece and says what it adds to the content and the reasoning;
    text that cannot be decided yet (half a marker) waits for the next piece."""

    def feed(self, text: str) -> Streamed: ...


class CallSyntax(abc.ABC):
    """One way of writing calls. Subclasses set ``name`` and take their TOML options as keywords."""

    name: str = "syntax"
    #: True when one answer may hold several calls (OpenAI's parallel tool calls).
    parallel_calls: bool = False
    #: True when the answer's content is the model's inner monologue (MemGPT), not text for the user.
    content_is_thoughts: bool = False
    #: The macro of wrappers/_tools.jinja that lists the tools and teaches this syntax, for a model whose
    #: own template knows no tools (wrapper "auto"); None where there is none.
    instructions: str | None = None
    #: True when an optional call can be decided as a choice (``AnswerShape.decide``): the call section
    #: starts at trigger words, so calling and answering part at the first step.
    can_choose: bool = False

    def template_context(self) -> Mapping[str, Any]:
        """Extra variables the wrapper's template sees (e.g. where the inner monologue goes)."""
        return {}

    def call_stops(self) -> tuple[str, ...]:
        """Stop strings that end an answer once its call is written (never applied to plain text)."""
        return ()

    @abc.abstractmethod
    def shape(self, call: CallMode, functions: Sequence[FunctionDefinition], allowed: Sequence[str], *,
              named: bool, parallel: bool, first_message: bool, primed: bool) -> AnswerShape:
        """The answer shape for a request. ``named``: tool_choice names ``allowed[0]``; ``parallel``: the
        request allows several calls; ``primed``: the prompt may end inside the answer (False for
        backends that must produce the whole answer)."""

    @abc.abstractmethod
    def render_turn(self, content: str, calls: Sequence[FunctionCall]) -> TurnText:
        """A past assistant turn (its content and its calls) as the model would have written it."""

    @abc.abstractmethod
    def grammar(self, shape: AnswerShape) -> Grammar:
        """A GBNF grammar admitting exactly the answers of ``shape`` (after its prefix)."""

    def json_schema(self, shape: AnswerShape) -> dict[str, Any] | None:
        """A JSON schema of the whole answer, for backends that constrain by schema; None where the
        answer is not one JSON value."""
        return None

    @abc.abstractmethod
    def parse(self, text: str, shape: AnswerShape) -> Answer:
        """The content and calls in ``text`` (what the model wrote after the prefix, cut at the end of
        its turn, its reasoning block taken out). Raises OutputParseError when no valid answer can be
        read; the caller attaches the raw output."""

    def call_start(self, text: str, shape: AnswerShape) -> int:
        """Where the call section of ``text`` begins, or -1: for finding a call written inside the
        reasoning. Syntaxes without a call section (the answer is one object) return -1."""
        return -1

    @abc.abstractmethod
    def scanner(self, shape: AnswerShape, *, calls: bool = False) -> Scanner:
        """A scanner for streaming the answer's content (and reasoning) while it is generated; with
        ``calls``, also its calls, where the syntax can stream them (a grammar wrote them, so they need
        no repair that could change what was sent)."""
