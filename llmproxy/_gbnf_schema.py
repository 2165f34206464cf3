"""JSON schema -> GBNF rules (the engine behind llmproxy.grammar.build_call_grammar).

What a schema becomes:

* string, integer (negatives too, unless ``minimum`` >= 0), number, boolean, null, ``enum``, ``const``;
* arrays with an ``items`` schema, honouring ``minItems``/``maxItems`` up to ``MAX_BOUNDED_ITEMS``;
* objects: declared properties in schema order, ``required`` ones always present, the others
  omissible. Only declared keys are admitted even when ``additionalProperties`` is not false: a
  model invents keys otherwise, and the schema's own keys are what the caller expects. So
  ``"properties": {}`` means ``{}``; only an object schema without ``properties`` admits free
  members (any, or those of the ``additionalProperties`` schema);
* ``anyOf``/``oneOf`` (as alternatives: "exactly one" is not enforced), ``allOf`` (merged: properties and
  required lists united), type lists such as ``["string", "null"]``, local ``$ref`` (``#/$defs/X``,
  recursion included).

Keywords a context-free grammar cannot express well (``format``, ``pattern``, lengths, numeric ranges
other than the sign, ``uniqueItems``, ``not``, ``if``/``then``, ``prefixItems``...) are ignored, so the
grammar admits a superset of the schema; the repair/validation step after generation still checks the
full schema. Malformed schemas and ones over the size/depth limits raise GrammarError.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmproxy.errors import ConfigurationError


class GrammarError(ConfigurationError):
    """A grammar llama.cpp would reject, or a schema too big, too deep or malformed to turn into one."""

    code = "grammar_error"


MAX_DEPTH = 16
MAX_NODES = 10_000
# llama.cpp expands S{m,n} into n rules and refuses expansions past 2000; bigger bounds fall back to S*.
MAX_BOUNDED_ITEMS = 64

# Shared building blocks, referenced by name and emitted only when used. Whitespace and digit runs are
# bounded so a small model cannot ramble inside them: between tokens comes nothing, one space, or one
# newline plus indentation (compact and pretty-printed JSON both fit; blank lines and long runs of tabs,
# which small models otherwise pile up, do not).
PRIMITIVES = {
    "ws": r'( " " | "\n" [ \t]{0,20} )?',
    "string": r'"\"" char* "\""',
    "char": r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "natural": r'"0" | [1-9] [0-9]{0,15}',
    "integer": r'"-"? natural',
    "unsigned-number": r'natural ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
    "number": r'"-"? unsigned-number',
    "boolean": r'"true" | "false"',
    "null": r'"null"',
    "value": r"object | array | string | number | boolean | null",
    "object": r'"{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"',
    "array": r'"[" ws ( value ( ws "," ws value )* )? ws "]"',
}
_LITERALS = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
_RULE_NAME = re.compile(r"[a-zA-Z0-9-]+")  # the characters llama.cpp allows in rule names
_NOT_NAME = re.compile(r"[^a-zA-Z0-9]+")


def _primitives_in(body: str) -> set[str]:
    """Primitive rules a rule body refers to (words inside literals and char classes skipped)."""
    return set(_RULE_NAME.findall(_LITERALS.sub(" ", body))) & set(PRIMITIVES)


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal; everything outside printable ASCII is escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02X}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return '"' + "".join(out) + '"'


def json_literal(value: Any) -> str:
    """The GBNF literal matching ``value`` written as compact JSON (non-ASCII left unescaped in JSON)."""
    return gbnf_literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def key_value(key: str, value_expr: str) -> str:
    return f'{json_literal(key)} ws ":" ws {value_expr}'


def members(items: list[tuple[str, bool]], *, after_first: bool) -> str:
    """Comma-separated ``key: value`` items in fixed order; items flagged False may be left out.

    ``after_first``: something was already written inside the object, so every item needs a comma.
    """
    tail = [f'ws "," ws {kv}' if req else f'( ws "," ws {kv} )?' for kv, req in items]
    if after_first:
        return " ".join(tail)
    # Nothing written yet: the first item present is written without a comma; it is either a
    # leading optional item or the first required one, after which all follow in `tail` form.
    alternatives = []
    for i, (kv, req) in enumerate(items):
        alternatives.append(" ".join([kv, *tail[i + 1:]]))
        if req:
            break
    else:
        alternatives.append("")
    if len(alternatives) == 1:
        return alternatives[0]
    return "( " + " | ".join(alternatives) + " )"


class RuleSet:
    """Collects the GBNF rules of one grammar. Identical rule bodies share one rule."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self._by_body: dict[str, str] = {}
        self._refs: dict[tuple[int, str], str] = {}
        self._nodes = 0

    # --- naming and output ------------------------------------------------------------------

    def _fresh_name(self, hint: str) -> str:
        # GBNF rule names allow only letters, digits and '-'; function names also use '.' and '_'.
        base = _NOT_NAME.sub("-", hint).strip("-").lower() or "rule"
        name, n = base, 1
        while name in self.rules or name in PRIMITIVES or name == "root":
            n += 1
            name = f"{base}-{n}"
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
            nonnegative = any(_is_number(schema.get(k)) and schema[k] >= 0 for k in ("minimum", "exclusiveMinimum"))
            if kind == "integer":
                return "natural" if nonnegative else "integer"
            return "unsigned-number" if nonnegative else "number"
        if kind in ("string", "boolean", "null"):
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
        if first:
            body = " ".join([key_value(*first), members(items, after_first=True)])
        elif items:
            body = members(items, after_first=False)
        else:
            extra = schema.get("additionalProperties", True)
            if "properties" in schema or extra is False:  # declared keys only, and there are none
                return self.rule(hint, '"{" ws "}"')
            if extra is True or extra == {}:
                return "object"
            kv = f'string ws ":" ws {self.value(extra, f"{hint}-value", depth + 1, root)}'
            body = f'( {kv} ( ws "," ws {kv} )* )?'
        return self.rule(hint, f'"{{" ws {body.strip()} ws "}}"')

    def _array(self, schema: dict, hint: str, depth: int, root: dict) -> str:
        item = self.value(schema.get("items", True), f"{hint}-item", depth + 1, root)
        low = _item_count(schema, "minItems", hint) or 0
        high = _item_count(schema, "maxItems", hint)
        if high is not None and high < low:
            raise GrammarError(f"maxItems < minItems at {hint!r}")
        if high == 0:
            return self.rule(hint, '"[" ws "]"')
        more = f'( ws "," ws {item} )'
        if high is not None and high <= MAX_BOUNDED_ITEMS:
            more += f"{{{max(low - 1, 0)},{high - 1}}}"
        elif 1 < low <= MAX_BOUNDED_ITEMS:
            more += f"{{{low - 1},}}"
        else:
            more += "*"
        seq = f"{item} {more}"
        return self.rule(hint, f'"[" ws {seq} ws "]"' if low >= 1 else f'"[" ws ( {seq} )? ws "]"')

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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _item_count(schema: dict, keyword: str, hint: str) -> int | None:
    value = schema.get(keyword)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise GrammarError(f"'{keyword}' at {hint!r} must be a non-negative integer")
    return value


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
