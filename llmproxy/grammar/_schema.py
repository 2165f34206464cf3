"""JSON schema -> GBNF rules (the engine behind the call syntaxes' grammars and llmproxy.grammar.schema_grammar).

What a schema becomes (each keyword family in a module of its own):

* ``boolean``, ``null``, ``enum`` and ``const`` of any JSON value (objects and arrays too, written as
  compact JSON), type lists such as ``["string", "null"]``;
* integers: ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum`` as exact digit ranges,
  no leading zeros (llmproxy.grammar._ranges); numbers: exact for whole bounds, the integer part only
  for fractional ones; bounded numbers are plain decimals (no exponent);
* strings (llmproxy.grammar._strings): ``format`` date, time, date-time, uuid, email, ipv4
  (llmproxy.grammar._formats); ``pattern`` (llmproxy.grammar._regex: the regular subset; what has no grammar
  leaves the string free, a malformed pattern is an error); ``minLength``/``maxLength``. One of them
  shapes a string, in that order;
* arrays (llmproxy.grammar._lists): ``items``, ``prefixItems`` (and the older tuple ``items``) with
  ``items``/``additionalItems`` for the rest or ``false`` for none, ``minItems``/``maxItems``;
* objects: declared properties in schema order, ``required`` ones always present, the others omissible,
  ``minProperties``/``maxProperties`` counted over them (llmproxy.grammar._members; the grammar grows
  linearly with the properties). Only declared keys are admitted even when ``additionalProperties`` is
  not false: a model invents keys otherwise, and the schema's own keys are what the caller expects. So
  ``"properties": {}`` means ``{}``; only an object schema without ``properties`` admits free members
  (any, or those of the ``additionalProperties`` schema, counted by min/maxProperties);
* ``anyOf``/``oneOf`` (as alternatives: "exactly one" is not enforced), ``allOf`` (merged: properties and
  required lists united), local ``$ref`` (``#/$defs/X``, recursion included).

A grammar can only admit a superset where it cannot say more. Never in the grammar, so checked only by
the validation after generation: ``uniqueItems``, ``contains``, ``not``, ``if``/``then``/``else``,
``multipleOf``, ``dependentRequired``/``dependentSchemas``, ``patternProperties``, ``propertyNames``,
``oneOf``'s exclusivity, other formats, patterns outside the regular subset, two string keywords at
once (format, pattern and lengths do not intersect), fractional number bounds beyond the integer part,
keys in free members being distinct, and counts above the caps (lengths over 1000, item counts over
64, property counts needing too many states) which are loosened rather than expanded. Malformed
schemas and ones over the size/depth limits raise GrammarError.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmproxy.errors import GrammarError
from llmproxy.grammar._charsets import gbnf_literal
from llmproxy.grammar._lists import MAX_BOUNDED_ITEMS, list_body
from llmproxy.grammar._members import members
from llmproxy.grammar._ranges import integer_expr, number_expr
from llmproxy.grammar._strings import string_expr

__all__ = ["MAX_BOUNDED_ITEMS", "PRIMITIVES", "RuleSet", "gbnf_literal", "json_literal", "key_value", "schema_grammar"]

MAX_DEPTH = 16
MAX_NODES = 10_000

# Shared building blocks, referenced by name and emitted only when used. Whitespace and digit runs are
# bounded so a small model cannot ramble inside them: between tokens comes nothing, one space, or one
# newline plus indentation (compact and pretty-printed JSON both fit; blank lines and long runs of tabs,
# which small models otherwise pile up, do not).
PRIMITIVES = {
    "ws": r'( " " | "\n" [ \t]{0,20} )?',
    "string": r'"\"" char* "\""',
    "char": r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "natural": r'"0" | [1-9] [0-9]{0,15}',
    "integer": r'natural | "-" [1-9] [0-9]{0,15}',  # no "-0"
    "unsigned-number": r'natural ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?',  # 1e999 would read as infinity
    "number": r'"-"? unsigned-number',
    "boolean": r'"true" | "false"',
    "null": r'"null"',
    "value": r"object | array | string | number | boolean | null",
    "object": r'"{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"',
    "array": r'"[" ws ( value ws ( "," ws value ws )* )? "]"',
}
_LITERALS = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
_RULE_NAME = re.compile(r"[a-zA-Z0-9-]+")  # the characters llama.cpp allows in rule names
_NOT_NAME = re.compile(r"[^a-zA-Z0-9]+")


def _primitives_in(body: str) -> set[str]:
    """Primitive rules a rule body refers to (words inside literals and char classes skipped)."""
    return set(_RULE_NAME.findall(_LITERALS.sub(" ", body))) & set(PRIMITIVES)


def json_literal(value: Any) -> str:
    """The GBNF literal matching ``value`` written as compact JSON (non-ASCII left unescaped in JSON)."""
    try:
        return gbnf_literal(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"{value!r} is not a JSON value: {exc}") from None


def key_value(key: str, value_expr: str) -> str:
    return f'{json_literal(key)} ws ":" ws {value_expr}'


class RuleSet:
    """Collects the GBNF rules of one grammar. Identical rule bodies share one rule."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self._by_body: dict[str, str] = {}
        self._refs: dict[tuple[int, str], str] = {}
        self._last_suffix: dict[str, int] = {}
        self._nodes = 0

    # --- naming and output ------------------------------------------------------------------

    def _fresh_name(self, hint: str) -> str:
        # GBNF rule names allow only letters, digits and '-'; function names also use '.' and '_'.
        base = _NOT_NAME.sub("-", hint).strip("-").lower() or "rule"
        n = self._last_suffix.get(base, 1)  # where the last search for this base ended: linear, not quadratic
        name = base if n == 1 else f"{base}-{n}"
        while name in self.rules or name in PRIMITIVES or name == "root":
            n += 1
            name = f"{base}-{n}"
        self._last_suffix[base] = n
        return name

    def rule(self, hint: str, body: str) -> str:
        """Name a rule for ``body`` (reusing an identical one) and return the name."""
        if body not in self._by_body:
            name = self._fresh_name(hint)
            self.rules[name] = body
            self._by_body[body] = name
        return self._by_body[body]

    def render(self, root: str) -> str:
        used = set().union(*map(_primitives_in, [root, *self.rules.values()]))
        todo = list(used)
        while todo:
            for dep in _primitives_in(PRIMITIVES[todo.pop()]) - used:
                used.add(dep)
                todo.append(dep)
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        lines += [f"{name} ::= {body}" for name, body in PRIMITIVES.items() if name in used]
        return "\n".join(lines) + "\n"

    # --- schemas ----------------------------------------------------------------------------

    def _count(self, nodes: int) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            raise GrammarError(f"tool schemas too large for a grammar (over {MAX_NODES} schema nodes)")

    def value(self, schema: Any, hint: str, depth: int, root: dict) -> str:
        """A GBNF expression (rule name or literal) for JSON values valid under ``schema``."""
        self._count(1)
        if depth > MAX_DEPTH:
            raise GrammarError(f"tool schema nested deeper than {MAX_DEPTH} levels at {hint!r}")
        if schema is True:
            return "value"
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {hint!r} must be an object, got {json.dumps(schema)[:80]}")
        if "$ref" in schema:
            return self._ref(schema["$ref"], hint, depth, root)
        if "allOf" in schema:
            return self.value(_merge_all_of(schema, hint, root), hint, depth + 1, root)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = {k: v for k, v in schema.items() if k != key}
                alts = _nonempty_list(schema[key], key, hint)
                return self._alternatives(hint, [
                    self.value({**rest, **sub} if isinstance(sub, dict) else sub, f"{hint}-{i}", depth + 1, root)
                    for i, sub in enumerate(alts)
                ])
        if "const" in schema:
            return json_literal(schema["const"])
        if "enum" in schema:
            values = _nonempty_list(schema["enum"], "enum", hint)
            self._count(len(values))
            return self._alternatives(hint, [json_literal(v) for v in values])
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = _nonempty_list(kind, "type", hint)
            return self._alternatives(hint, [self.value({**schema, "type": k}, hint, depth + 1, root) for k in kinds])
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            else:
                return "value"
        if kind == "object":
            return self.object(schema, hint, depth, root)
        if kind == "array":
            return self._array(schema, hint, depth, root)
        if kind in ("integer", "number"):
            expr = integer_expr(schema, hint) if kind == "integer" else number_expr(schema, hint)
            return expr if expr in PRIMITIVES else self.rule(hint, expr)
        if kind == "string":
            return string_expr(self, schema, hint)
        if kind in ("boolean", "null"):
            return kind
        raise GrammarError(f"unknown JSON schema type {kind!r} at {hint!r}")

    def object(self, schema: dict, hint: str, depth: int, root: dict, first: tuple[str, str] | None = None) -> str:
        """Rule for an object. ``first`` = (key, value expression): a member forced in first place."""
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise GrammarError(f"'properties' at {hint!r} must be an object")
        required = schema.get("required") or []
        if not isinstance(required, list):
            raise GrammarError(f"'required' at {hint!r} must be a list of property names")
        items = [
            (key_value(key, self.value(sub, f"{hint}-{key}", depth + 1, root)), key in required)
            for key, sub in props.items()
            if not (first and key == first[0])
        ]
        low, high = _counts(schema, "minProperties", "maxProperties", hint)
        if items or first:
            body = members(self, hint, items, after_first=first is not None, low=low, high=high)
            if first:
                body = " ".join(filter(None, [f"{key_value(*first)} ws", body]))
        else:
            extra = schema.get("additionalProperties", True)
            if "properties" in schema or extra is False:  # declared keys only, and there are none
                return self.rule(hint, '"{" ws "}"')
            free = extra is True or extra == {}
            if free and not low and high is None:
                return "object"
            value = "value" if free else self.value(extra, f"{hint}-value", depth + 1, root)
            body = list_body(self, hint, [], f'string ws ":" ws {value}', low, high)
        return self.rule(hint, f'"{{" ws {body} "}}"' if body else '"{" ws "}"')

    def _array(self, schema: dict, hint: str, depth: int, root: dict) -> str:
        rest = schema.get("items", True)
        prefix = schema.get("prefixItems", [])
        if isinstance(rest, list):  # the tuple form of drafts before 2020-12
            prefix, rest = rest, schema.get("additionalItems", True)
        if not isinstance(prefix, list):
            raise GrammarError(f"'prefixItems' at {hint!r} must be a list of schemas")
        self._count(len(prefix))
        firsts = [self.value(sub, f"{hint}-{i}", depth + 1, root) for i, sub in enumerate(prefix)]
        later = None if rest is False else self.value(rest, f"{hint}-item", depth + 1, root)
        low, high = _counts(schema, "minItems", "maxItems", hint)
        body = list_body(self, hint, firsts, later, low, high)
        return self.rule(hint, f'"[" ws {body} "]"' if body else '"[" ws "]"')

    def _alternatives(self, hint: str, exprs: list[str]) -> str:
        unique = list(dict.fromkeys(exprs))
        return unique[0] if len(unique) == 1 else self.rule(hint, " | ".join(unique))

    def _ref(self, ref: Any, hint: str, depth: int, root: dict) -> str:
        key = (id(root), ref)
        if key not in self._refs:
            # Name the rule before building it so a recursive schema refers back to it.
            name = self._refs[key] = self._fresh_name(str(ref).rsplit("/", 1)[-1] or hint)
            self.rules[name] = ""
            self.rules[name] = self.value(_resolve(ref, root, hint), name, depth + 1, root)
        return self._refs[key]


def _nonempty_list(value: Any, keyword: str, hint: str) -> list:
    if not isinstance(value, list) or not value:
        raise GrammarError(f"'{keyword}' at {hint!r} must be a non-empty list")
    return value


def _item_count(schema: dict, keyword: str, hint: str) -> int | None:
    value = schema.get(keyword)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise GrammarError(f"'{keyword}' at {hint!r} must be a non-negative integer")
    return value


def _counts(schema: dict, least: str, most: str, hint: str) -> tuple[int, int | None]:
    """A count range such as minItems/maxItems (no minimum: 0; no maximum: None)."""
    low, high = _item_count(schema, least, hint) or 0, _item_count(schema, most, hint)
    if high is not None and high < low:
        raise GrammarError(f"{most} < {least} at {hint!r}")
    return low, high


def _resolve(ref: Any, root: dict, hint: str) -> Any:
    """Follow a local JSON pointer such as ``#/$defs/Item`` inside the function's parameters schema."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise GrammarError(f"only local $ref ('#/...') is supported, got {ref!r} at {hint!r}")
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise GrammarError(f"$ref {ref!r} at {hint!r} points nowhere")
        node = node[part]
    return node


def _merge_all_of(schema: dict, hint: str, root: dict) -> dict:
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for part in _nonempty_list(schema["allOf"], "allOf", hint):
        seen = set()
        while isinstance(part, dict) and "$ref" in part:
            if part["$ref"] in seen:
                raise GrammarError(f"circular $ref {part['$ref']!r} at {hint!r}")
            seen.add(part["$ref"])
            part = {**_resolve(part["$ref"], root, hint), **{k: v for k, v in part.items() if k != "$ref"}}
        if not isinstance(part, dict):
            raise GrammarError(f"'allOf' at {hint!r} must list schema objects")
        props = {**merged.get("properties", {}), **part.get("properties", {})}
        required = [*merged.get("required", []), *part.get("required", [])]
        merged = {**merged, **part}
        if props:
            merged["properties"] = props
        if required:
            merged["required"] = required
    return merged


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF for JSON values valid under ``schema`` (a superset where GBNF cannot express a keyword);
    used for ``response_format`` json_schema. Call grammars come from the call syntaxes
    (llmproxy/syntaxes/), built on the same rules."""
    rules = RuleSet()
    return rules.render("ws " + rules.value(schema, "answer", 1, schema))
