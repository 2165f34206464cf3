"""Output constraints a request asks for itself: ``response_format`` (``json_object``, ``json_schema``)
and the ``grammar`` field of /v1/completions.

A backend that takes GBNF gets a grammar; one that takes a JSON schema instead (Ollama's ``format``)
gets the schema; any other cannot honour the request and says so. Call grammars come from the tool
schemas (llmproxy.proxy); these constraints apply to plain-text answers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llmproxy.backends.base import Backend
from llmproxy.errors import InvalidRequestError, UnsupportedRequestError
from llmproxy.grammar import grammar_names, load_grammar, schema_grammar, validate_grammar
from llmproxy.proxy import Plan
from llmproxy.types import ResponseFormat

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Constraint:
    """At most one of ``grammar`` (GBNF text) and ``json_schema``; ``label`` names it for the log."""

    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    label: str | None = None

    def settings(self) -> dict[str, Any]:
        """The constraint as generation settings."""
        return {key: value for key, value in (("grammar", self.grammar), ("json_schema", self.json_schema)) if value}


def _format_schema(response_format: ResponseFormat) -> dict[str, Any] | None:
    if response_format.type == "json_object":
        return _ANY_OBJECT
    if response_format.type == "json_schema":
        schema = (response_format.json_schema or {}).get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequestError("response_format.json_schema.schema must be a JSON schema object",
                                      param="response_format.json_schema.schema")
        return schema
    return None


def _refuse(backend: Backend, asked: str, able: str) -> UnsupportedRequestError:
    return UnsupportedRequestError(
        f"the {backend.name} backend cannot constrain its output as {asked} asks; use a backend that can ({able})",
        param=asked,
    )


def _checked(text: str, label: str) -> Constraint:
    validate_grammar(text)  # a grammar llama.cpp rejects can crash the backend
    return Constraint(grammar=text, label=label)


def format_constraint(backend: Backend, response_format: ResponseFormat | None) -> Constraint:
    """What ``response_format`` asks of ``backend``; no constraint for plain text."""
    schema = _format_schema(response_format) if response_format is not None else None
    if schema is None:
        return Constraint()
    if backend.capabilities.grammar:
        if schema is _ANY_OBJECT:
            return _checked(load_grammar("json"), "json")
        return _checked(schema_grammar(schema), "json_schema")
    if backend.capabilities.json_schema:
        return Constraint(json_schema=schema, label="json_schema")
    raise _refuse(backend, "response_format", "embedded, llamacpp, koboldcpp, webui, vllm, ollama")


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
        raise _refuse(backend, "grammar", "embedded, llamacpp, koboldcpp, webui, vllm")
    return _checked(text, label)


def with_response_format(plan: Plan) -> Plan:
    """``plan`` constrained by the request's ``response_format`` when the answer is plain text.

    A call answer is JSON already and follows its own constraint, so the format is not applied to it.
    """
    if plan.rendered.call != "text" or plan.request.response_format is None:
        return plan
    constraint = format_constraint(plan.route.backend, plan.request.response_format)
    if constraint.label is None:
        return plan
    params = replace(plan.params, grammar=constraint.grammar, json_schema=constraint.json_schema)
    return replace(plan, params=params, grammar=constraint.label)
