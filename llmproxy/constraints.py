"""The output constraint of a generation: which grammar or JSON schema, if any, the backend decodes under.

One module decides for everything that can constrain an answer:

- a call: the call syntax's grammar where the backend takes GBNF (lazily from a trigger word, or as a
  first-step choice between calling and answering, where the backend takes those forms), its JSON schema
  where the backend takes a schema instead (Ollama's ``format``), a grammar file the route names, or
  nothing (the answer is then repaired and validated only);
- ``response_format`` (``json_object``, ``json_schema``) for a plain-text answer;
- the ``grammar`` field of a raw completion (a shipped grammar's name, or GBNF text).

Which backends can honour what is read off the backends' own capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from llmproxy.backends import backends_with
from llmproxy.backends.base import Backend
from llmproxy.decide import CALL_BIAS, CONTINUE_BIAS, GROUNDING_BIAS, RELEVANCE_FLOOR, RELEVANCE_WEIGHT
from llmproxy.errors import GrammarError, InvalidRequestError, UnsupportedRequestError
from llmproxy.grammar import grammar_names, load_grammar, schema_grammar, validate_grammar
from llmproxy.types import ResponseFormat

if TYPE_CHECKING:
    from llmproxy.route import Route
    from llmproxy.syntaxes.base import AnswerShape, CallMode, GrammarChoice, LazyGrammar

CallConstraint = Literal["generated", "json_schema", "named"]
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Constraint:
    """At most one of ``grammar`` (GBNF text) and ``json_schema``; ``label`` names it for logs and responses."""

    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    label: str | None = None
    lazy: LazyGrammar | None = None  # ``grammar`` from a trigger word on, for servers that take that form
    choice: GrammarChoice | None = None  # ``grammar`` as a first-step choice, for backends that make it

    def settings(self) -> dict[str, Any]:
        """The constraint as generation settings."""
        fields = (("grammar", self.grammar), ("lazy_grammar", self.lazy), ("choice_grammar", self.choice),
                  ("json_schema", self.json_schema))
        return {key: value for key, value in fields if value}


NONE = Constraint()


def _refuse(backend: Backend, asked: str, what: str, *capabilities: str) -> UnsupportedRequestError:
    return UnsupportedRequestError(
        f"{asked} was asked for, but the {backend.name} backend cannot {what}; "
        f"use a backend that can ({', '.join(backends_with(*capabilities))})",
        param=asked.split()[0],
    )


def _checked(text: str, label: str) -> Constraint:
    validate_grammar(text)  # a grammar llama.cpp rejects can crash the backend
    return Constraint(grammar=text, label=label)


# --- calls -----------------------------------------------------------------------------------


def call_constraint(route: Route, call: CallMode) -> CallConstraint | None:
    """How a call answer on ``route`` will be constrained. Decided before rendering: a backend that
    takes a JSON schema must write the whole answer, so its prompt is not primed."""
    if route.grammar == "none" or call == "text":
        return None
    capabilities = route.backend.capabilities
    if route.grammar != "auto":
        if not capabilities.grammar:
            raise _refuse(route.backend, f"grammar {route.grammar!r}", "take grammars (or use --grammar none)",
                          "grammar")
        return "named"
    if capabilities.grammar:
        return "generated"
    if capabilities.json_schema:
        return "json_schema"
    return None  # nothing can constrain it: the answer still goes through repair and validation


def answer_constraint(kind: CallConstraint | None, route: Route, shape: AnswerShape,
                      response_format: ResponseFormat | None) -> Constraint:
    """The constraint for an answer of ``shape``: its call's (``kind``), or for a plain-text answer the
    request's ``response_format``."""
    if shape.call == "text":
        return format_constraint(route.backend, response_format)
    if kind == "generated":
        grammar = shape.syntax.grammar(shape)
        if grammar.choice is not None and route.backend.capabilities.choice_grammar:
            validate_grammar(grammar.choice.calls)
            validate_grammar(grammar.choice.answer)
            choice = replace(grammar.choice, call_bias=CALL_BIAS, relevance_weight=RELEVANCE_WEIGHT,
                             relevance_floor=RELEVANCE_FLOOR, continue_bias=CONTINUE_BIAS, grounding_bias=GROUNDING_BIAS)
            return replace(_checked(grammar.text, grammar.label), choice=choice)
        if grammar.lazy is not None and route.backend.capabilities.lazy_grammar:
            validate_grammar(grammar.lazy.text)
            return replace(_checked(grammar.text, grammar.label), lazy=grammar.lazy)
        return _checked(grammar.text, grammar.label)
    if kind == "json_schema":
        schema = shape.syntax.json_schema(shape)
        return Constraint(json_schema=schema, label="json_schema") if schema is not None else NONE
    if kind == "named":
        return _checked(load_grammar(route.grammar), route.grammar)
    return NONE


# --- response_format and raw grammars --------------------------------------------------------


def format_schema(response_format: ResponseFormat) -> dict[str, Any] | None:
    """The JSON schema ``response_format`` asks the answer to follow (any object for json_object), or
    None for plain text."""
    if response_format.type == "json_object":
        return _ANY_OBJECT
    if response_format.type == "json_schema":
        schema = (response_format.json_schema or {}).get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequestError("response_format.json_schema.schema must be a JSON schema object",
                                      param="response_format.json_schema.schema")
        return schema
    return None


def format_constraint(backend: Backend, response_format: ResponseFormat | None) -> Constraint:
    """What ``response_format`` asks of ``backend``; no constraint for plain text."""
    schema = format_schema(response_format) if response_format is not None else None
    if schema is None:
        return NONE
    if backend.capabilities.grammar:
        if schema is _ANY_OBJECT:
            return _checked(load_grammar("json"), "json")
        return _checked(schema_grammar(schema), "json_schema")
    if backend.capabilities.json_schema:
        return Constraint(json_schema=schema, label="json_schema")
    return NONE  # nothing can constrain it: the answer is still repaired and checked against the schema


def grammar_constraint(backend: Backend, grammar: str) -> Constraint:
    """The /v1/completions ``grammar`` field: a shipped grammar's name, or GBNF text."""
    if grammar in grammar_names():
        text, label = load_grammar(grammar), grammar
    elif "::=" in grammar:
        text, label = grammar, "request"
    else:
        raise InvalidRequestError(
            f"grammar {grammar!r} is neither a grammar name ({', '.join(grammar_names())}) nor GBNF text",
            param="grammar",
        )
    if not backend.capabilities.grammar:
        raise _refuse(backend, "grammar", "take grammars", "grammar")
    try:
        return _checked(text, label)
    except GrammarError as exc:  # the request's own field: say which
        raise GrammarError(exc.message, param="grammar") from None
