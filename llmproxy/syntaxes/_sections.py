"""The shape most families' answers share: reasoning, then content, then a call section.

::

    [<think> reasoning </think>]  content  [TRIGGER call ... call]

The call section starts at one of the syntax's trigger words and holds one or more calls. Where a
call is required the answer is the call section (after any reasoning); where it is optional the
content may be the whole answer. ``SectionSyntax`` implements the protocol for all such syntaxes;
a syntax module adds only what is its own: the trigger words, the grammar of its call section, how
to read calls out of it, and how a past call is written.

Because calling and answering part at the answer's first step (a trigger word, or anything else), an
optional call can also be decided as a choice there (``AnswerShape.decide``): the grammar then comes
in three forms - the whole answer, the calls alone, the text alone - and a backend that chooses from
the model's probabilities takes the last two (``GrammarChoice``).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.errors import OutputParseError
from llmproxy.grammar import RuleSet, gbnf_literal
from llmproxy.syntaxes._free_text import text_without, text_without_opening
from llmproxy.syntaxes._json_calls import checked_size, definitions_key, load_definitions
from llmproxy.syntaxes._scanners import CallScanner, TextScanner
from llmproxy.syntaxes.base import (
    Answer,
    AnswerShape,
    Call,
    CallMode,
    CallPiece,
    CallSyntax,
    Grammar,
    GrammarChoice,
    LazyGrammar,
    Reasoning,
    Streamed,
    TurnText,
)
from llmproxy.types import FunctionCall, FunctionDefinition


class SectionSyntax(CallSyntax):
    """A syntax whose calls follow optional content, from a trigger word on (see the module docstring)."""

    parallel_calls = True
    can_choose = True
    #: Special tokens the call section is written with, which llama.cpp must keep as text.
    preserved_tokens: tuple[str, ...] = ()

    # --- what a syntax module provides ---------------------------------------------------------

    @abc.abstractmethod
    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        """The words a call section starts with (for calls to ``allowed``)."""

    @abc.abstractmethod
    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        """A rule for the call section: a trigger word, then one call (or, with ``parallel``, one or more)."""

    @abc.abstractmethod
    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        """The calls in a call section (from its trigger word on) and the repairs that reading needed.
        Raises OutputParseError when no call can be read."""

    @abc.abstractmethod
    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        """Past calls written as the model writes them."""

    def call_head(self) -> re.Pattern[str] | None:
        """What a call starts with, up to its JSON arguments, capturing the function's ``name`` (a JSON
        string's inside): for streaming calls as they are written. None: sent once read and checked."""
        return None

    # --- the protocol -----------------------------------------------------------------------------

    def shape(self, call: CallMode, functions: Sequence[FunctionDefinition], allowed: Sequence[str], *,
              named: bool, parallel: bool, first_message: bool, primed: bool) -> AnswerShape:
        return AnswerShape(self, call, tuple(functions), tuple(allowed), parallel and self.parallel_calls)

    def render_turn(self, content: str, calls: Sequence[FunctionCall]) -> TurnText:
        return TurnText(content, (self.render_calls(calls),) if calls else ())

    #: True where ``list_rule`` gives the syntax's list of several calls.
    lists_calls = False
    #: What stands between two JSON call objects of such a list, where they are bare JSON objects.
    call_separator: str | None = None

    def list_rule(self, rules: RuleSet, first: str, rest: str) -> str | None:
        """A call section of several calls, the first by rule ``first`` and any more by ``rest``, in the
        form the syntax lists calls in; None where it has no such form."""
        return None

    def grammar(self, shape: AnswerShape) -> Grammar:
        definitions = definitions_key(shape)
        form = "calls" if shape.call == "required" else "answer" if shape.decide == "answer" else "either"
        text, lazy = _grammar(self, definitions, form, shape.parallel, shape.reasoning, shape.first)
        choice = None
        if shape.decide == "choose":
            calls = _grammar(self, definitions, "calls", shape.parallel, shape.reasoning)[0]
            answer = _grammar(self, definitions, "answer", shape.parallel, shape.reasoning)[0]
            choice = GrammarChoice(calls, answer, self.triggers(shape.allowed))
        if lazy is None:
            return Grammar(text, choice=choice)
        return Grammar(text, lazy=LazyGrammar(lazy, self.triggers(shape.allowed), self.preserved_tokens),
                       choice=choice)

    def call_start(self, text: str, shape: AnswerShape) -> int:
        found = [i for i in (text.find(word) for word in self.triggers(shape.allowed)) if i >= 0]
        return min(found, default=-1)

    def parse(self, text: str, shape: AnswerShape) -> Answer:
        start = self.call_start(text, shape)
        if shape.decide != "free" and not text.lstrip().startswith(self.triggers(shape.allowed)):
            start = -1  # the first step chose to answer: whatever the text holds is no call
        if start < 0:
            if shape.call == "required":
                raise OutputParseError("The model's answer holds no call.", text)
            return Answer(text.strip() or None)
        calls, repairs = self.read_calls(text[start:])
        return Answer(text[:start].strip() or None, tuple(calls), repairs)

    def scanner(self, shape: AnswerShape, *, calls: bool = False) -> SectionScanner:
        head = self.call_head() if calls else None
        return SectionScanner(self.triggers(shape.allowed), shape.reasoning,
                              CallScanner(head) if head is not None else None)


@bounded_cache(32 * MIB)
def _grammar(syntax: SectionSyntax, definitions: str, form: str, parallel: bool,
             reasoning: Reasoning | None, first: str | None = None) -> tuple[str, str | None]:
    """(whole-answer grammar, lazy grammar from a trigger on or None), cached per syntax and functions.
    ``form``: "calls" (a call is required), "either" (text, then calls or not) or "answer" (text only);
    ``first``: the function the first call is to (``AnswerShape.first``)."""
    functions = load_definitions(definitions)
    rules = RuleSet()
    lazy = None
    if form == "answer":  # chosen to be text: it cannot start the way a call does, whatever the spacing
        body = text_without_opening(rules, syntax.triggers([f.name for f in functions]), "content")
    elif first is not None:
        section = _first_call_section(syntax, rules, functions, first, parallel)
        body = section
    else:
        section = syntax.section_rule(rules, functions, parallel)
        body = section
        if form == "either":
            body = f"{text_without(rules, syntax.triggers([f.name for f in functions]), 'content')} ( {section} )?"
            lazy = checked_size(rules.render(section))
    if reasoning is not None:
        thought = text_without(rules, [reasoning.close], "reasoning")
        block = f"{thought} {gbnf_literal(reasoning.close)} ws"
        body = f"{block} {body}" if reasoning.opened else f"( {gbnf_literal(reasoning.open)} {block} )? {body}"
    return checked_size(rules.render(body)), lazy


def _first_call_section(syntax: SectionSyntax, rules: RuleSet, functions: Sequence[FunctionDefinition], first: str,
                        parallel: bool) -> str:
    """A call section whose first call is to ``first``: where calls may be several and the syntax lists
    them, written as a single call is, with more after it, to any of ``functions``; else its calls are all
    to ``first``."""
    chosen = [function for function in functions if function.name == first]
    if parallel:
        listed = syntax.list_rule(rules, syntax.section_rule(rules, chosen, False),
                                  syntax.section_rule(rules, functions, False))
        if listed is not None:
            return listed
    return syntax.section_rule(rules, chosen, parallel)


# --- reasoning -------------------------------------------------------------------------------


def split_reasoning(text: str, reasoning: Reasoning | None) -> tuple[str | None, str]:
    """(the reasoning block's text, the rest of the answer). An unclosed block is all reasoning."""
    if reasoning is None:
        return None, text
    if not reasoning.opened:
        stripped = text.lstrip()
        if not stripped.startswith(reasoning.open):
            return None, text
        text = stripped[len(reasoning.open):]
    end = text.find(reasoning.close)
    if end < 0:
        return text.strip(), ""
    return text[:end].strip(), text[end + len(reasoning.close):]


# --- streaming -------------------------------------------------------------------------------


class SectionScanner:
    """Streams reasoning and content as they are generated, then the call section's calls to ``calls``
    (without one, the calls are sent once they have been read and checked). Like the final answer, each
    part is trimmed: whitespace, and text that may be the start of a marker, wait for the next piece."""

    def __init__(self, triggers: Sequence[str], reasoning: Reasoning | None, calls: CallScanner | None = None) -> None:
        self._triggers = tuple(triggers)
        self._reasoning = reasoning
        self._calls = calls
        self._state = "reasoning" if reasoning is not None and reasoning.opened else "start"
        self._pending = ""
        self._started = {"reasoning": False, "content": False}

    def feed(self, text: str) -> Streamed:
        self._pending += text
        parts = {"reasoning": [], "content": []}
        while self._state != "calls" and self._advance(parts):
            pass
        calls: tuple[CallPiece, ...] = ()
        if self._state == "calls":
            calls = self._calls.feed(self._pending) if self._calls is not None else ()
            self._pending = ""
        return Streamed("".join(parts["content"]), "".join(parts["reasoning"]), calls)

    def _advance(self, parts: dict[str, list[str]]) -> bool:
        """Read what the pending text decides; False when the rest must wait for more text."""
        if self._state == "start":
            stripped = self._pending.lstrip()
            opener = self._reasoning.open if self._reasoning is not None else ""
            if not stripped or (opener and opener.startswith(stripped)):
                return False  # nothing yet, or perhaps the opening tag
            if opener and stripped.startswith(opener):
                self._pending, self._state = stripped[len(opener):], "reasoning"
            else:
                self._state = "content"
            return True
        ends = (self._reasoning.close, *self._triggers) if self._state == "reasoning" else self._triggers
        ready, marker = _until(self._pending, ends)
        self._pending = self._pending[len(ready):]
        self._emit(self._state, ready, parts, final=marker is not None)
        if marker is None:
            return False
        if marker == getattr(self._reasoning, "close", None):
            self._pending, self._state = self._pending[len(marker):], "content"
        else:
            self._state = "calls"  # the call section starts with its trigger word
        return True

    def _emit(self, kind: str, ready: str, parts: dict[str, list[str]], *, final: bool) -> None:
        """Send ``ready`` as ``kind``, trimmed as the final answer will be: whitespace at its end waits
        for what follows, and is dropped where the part ends (``final``)."""
        if not self._started[kind]:
            ready = ready.lstrip()
        held = ready[len(ready.rstrip()):]
        ready = ready[:len(ready) - len(held)]
        if not final:
            self._pending = held + self._pending
        if ready:
            self._started[kind] = True
            parts[kind].append(ready)


class ReasoningTextScanner:
    """A plain-text answer of a family that reasons first: the text as ``TextScanner`` reads it (cut at
    the end of the turn), its reasoning block streamed as reasoning, as the final answer splits it."""

    def __init__(self, markers: Sequence[str], reasoning: Reasoning) -> None:
        self._text = TextScanner(markers)
        self._sections = SectionScanner((), reasoning)

    def feed(self, text: str) -> Streamed:
        return self._sections.feed(self._text.feed(text).content)


def text_scanner(markers: Sequence[str], reasoning: Reasoning | None) -> TextScanner | ReasoningTextScanner:
    """The scanner of a plain-text answer ending at ``markers``."""
    return TextScanner(markers) if reasoning is None else ReasoningTextScanner(markers, reasoning)


def _until(text: str, markers: Sequence[str]) -> tuple[str, str | None]:
    """The part of ``text`` that is surely before any of ``markers``, and the marker found (or None).
    Text that could be the beginning of a marker is held back."""
    hits = [(text.find(m), m) for m in markers if m and text.find(m) >= 0]
    if hits:
        index, marker = min(hits)
        return text[:index], marker
    keep = max((n for m in markers for n in range(1, len(m)) if text.endswith(m[:n])), default=0)
    return text[:len(text) - keep], None
