"""Recover the JSON a local model meant to write: one object, an array, or several values in a row.

Small models break JSON in a few recurring ways: they stop mid-output (max_tokens), wrap the value in
prose, markdown fences or ``<think>`` blocks, go on to write the user's next turn, write Python or
JavaScript instead of JSON, leak stop tokens, or forget quotes and commas. The functions here undo
those mistakes and say which ones they undid; they refuse (``JSONRepairError``) whenever a fix would
mean inventing a value.

* :func:`repair` – the first JSON object (anything after it is dropped and reported). A top-level
  array is refused: a caller that takes a list asks for one.
* :func:`repair_value` – ``expect="object"`` is :func:`repair`; ``expect="array"`` returns a list:
  the first array, or, where the model wrote objects without the brackets (``[TOOL_CALLS] {...}``,
  ``{...}{...}``), those objects; ``expect="any"`` returns whichever of object or array comes first.
* :func:`repair_all` – every object or array written back to back at the top level (separated by
  nothing, white space, commas or semicolons), in order, as written (an array is not flattened):
  independent calls become parallel calls. A later value that cannot be recovered ends the list.

Valid JSON goes straight through the C decoder (``strict=False``, so raw newlines inside strings are
accepted, as in MemGPT); a valid value with text around it costs one more C call per value. Anything
else goes to the single-pass, explicit-stack parser in :mod:`llmproxy.repair._json_scan`: linear in the
input, no recursion, nesting capped at ``MAX_DEPTH`` (an error beyond it). At most three ``{`` (or
array starts) are tried as the start when the first ones hold only prose.

Repair names (``Repaired.repairs``, in the order they first fired):

* ``strip_think`` – removed ``<think>``/``<thinking>`` blocks (or everything up to a stray closing tag;
  kept when the only value is inside the thinking)
* ``strip_fence`` – took the body of a markdown ````` fence, or dropped a trailing fence
* ``strip_prefix`` / ``strip_suffix`` – dropped text before / after the value (for :func:`repair`,
  the FIRST object wins when two are written back to back; the others are this suffix)
* ``strip_next_turn`` – the dropped text (also reported as ``strip_suffix`` or
  ``strip_special_token``) is a next chat turn the model wrote itself: ``User: ...``,
  ``### Instruction:``, ``<|im_start|>user``, ``[INST]``... A line like that inside an unclosed
  object or array ends it there, and nothing after it is taken, objects included
* ``strip_special_token`` – cut the text at a leaked chat token such as ``<|im_end|>``, ``<|>``, ``</s>``,
  ``<end_of_turn>``
* ``split_objects`` – several values written back to back were returned as separate values
  (:func:`repair_all`) or as the items of one list (``repair_value(expect="array")``)
* ``wrap_array`` – ``repair_value(expect="array")`` found objects without the array's brackets and
  returned them as a list
* ``drop_broken_value`` – a later value written back to back could not be recovered; it and the text
  after it were dropped (the values before it are returned)
* ``decode_string`` – the whole output was a JSON string holding the value
* ``unescape_json`` – the value was written with escaped quotes: ``{\\"a\\": 1}``
* ``decode_nested_json`` – an arguments field (``params``, ``arguments``, ...) held the object as a string
* ``strip_comment`` – removed ``//``, ``/* */`` or ``#`` comments
* ``drop_trailing_comma`` / ``drop_extra_comma`` – ``[1,]`` / ``[1,,2]``
* ``drop_ellipsis`` – dropped a ``...`` (or ``…``) standing for left-out array items
  (``[{...}, ...]``) or members (``{"a": 1, ...}``); as a member's value it is refused
* ``drop_truncated_item`` – in a top-level array cut off by the end of the text, dropped the last
  item when it was cut right after it opened or after a key (no value is invented; the complete
  items are kept)
* ``insert_comma`` – added a missing comma between members or items
* ``fix_bracket`` – a ``]``/``}`` closed the wrong container: closed the inner ones, or dropped a stray
  one, or closed the object before more ``, "key": value`` members (those are kept)
* ``close_brackets`` – closed containers left open at the end (truncated output)
* ``close_string`` – closed a string the model left open: at the end of the text (trailing ``}``/``]``
  in it are taken as the closers the model wrote), or before a ``"key":`` that follows a comma or a
  line break inside it (``"city": "New York, "zip": 1``)
* ``drop_truncated_key`` – dropped a key cut off before its closing quote (no value is invented)
* ``quote_key`` / ``quote_value`` – unquoted key, or bare text as a value (``"message": Hello there!``)
* ``single_quotes`` / ``smart_quotes`` – strings delimited by ``'...'`` or by typographic quotes
* ``fix_escape`` – invalid escape: ``\\_`` or ``\\'`` lose the backslash; before a letter or digit
  (``\\d``, ``C:\\Users``) the backslash is kept as a literal one
* ``escape_inner_quote`` – an unescaped ``"`` inside a string that plainly does not end it
* ``normalize_literal`` – ``True``/``False``/``None``/``TRUE``/``undefined`` -> JSON literals
* ``complete_literal`` – a literal cut at the end of the text (``tru`` -> ``true``)
* ``tuple_to_array`` – a Python tuple ``(1, 2)`` became an array (only where an item follows the
  ``(``: ``(see above)`` stays text)
* ``drop_digit_separator`` – Python's ``1_000_000`` became ``1000000``
* ``fix_number`` – ``+1``, ``.5``, ``1.``, ``007``, a number cut after its ``e``
* ``nonfinite_to_null`` – ``NaN``/``Infinity`` (and overflowing numbers) become ``null``: JSON cannot
  carry them and the arguments are re-serialised for OpenAI clients that would reject them
* ``skip_garbage`` – skipped text where a key was expected (e.g. junk lines after a valid prefix)

Refused: empty text, text without ``{`` (or, for arrays, without an array start), a top-level
number/string that is not an encoded value (and, for :func:`repair`, a top-level array), a key with
no value (``{"a": 1, "b":}``, ``{"message"``, ``{"function":``, ``{"a": ...}``), an object that held
only prose (``{I think the user wants help}``, at any depth), prose where the function name belongs
(``{"function": I apologize, but ...`` after a forced prefix: a bare value with spaces under
``function``/``name``/``tool`` in the top-level object, a top-level array's item or the object under
``function``), and values from which nothing was recovered (a lone ``{``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from llmproxy.repair._json_scan import DECODER, MAX_DEPTH, MORE_MEMBERS, TURN, NothingFound, parse_container, read_string
from llmproxy.errors import JSONRepairError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "Repaired", "RepairedMany", "repair", "repair_all", "repair_json", "repair_value"]

_MAX_NEST = 2  # how many times a value may be found JSON-encoded inside a string
MAX_VALUES = 1000  # values back to back: far more parallel calls than any model makes
_ARG_KEYS = frozenset({"params", "parameters", "arguments", "args", "kwargs", "input"})
# What each caller asks for: "all" is repair_all's every top-level value.
_Want = Literal["object", "array", "any", "all"]
_WHAT = {"object": "an object", "array": "an array", "any": "an object or array", "all": "an object or array"}


@dataclass(frozen=True)
class Repaired:
    value: Any  # a dict from repair(); a dict or a list from repair_value()
    repairs: tuple[str, ...]


@dataclass(frozen=True)
class RepairedMany:
    values: tuple[Any, ...]  # each a dict or a list, in the order written
    repairs: tuple[str, ...]


def repair_json(text: str) -> dict:
    """Return the JSON object in ``text``; raise ``JSONRepairError`` if none can be honestly recovered."""
    return repair(text).value


def repair(text: str) -> Repaired:
    """Return the recovered object and the names of the repairs it needed (see the module docstring)."""
    return repair_value(text)


def repair_value(text: str, *, expect: Literal["object", "array", "any"] = "object") -> Repaired:
    """Return the recovered object (``expect="object"``), array (``"array"``: a list, see the module
    docstring) or whichever of the two comes first (``"any"``), and the repairs it needed."""
    if expect not in ("object", "array", "any"):
        raise ValueError(f"expect must be 'object', 'array' or 'any', not {expect!r}")
    rep: list[str] = []
    value = _recover(_text(text), expect, rep, 0)
    return Repaired(value, tuple(dict.fromkeys(rep)))


def repair_all(text: str) -> RepairedMany:
    """Return every object or array written back to back at the top level (separated by nothing,
    white space, commas or semicolons), so independent calls can become parallel calls."""
    rep: list[str] = []
    values = _recover(_text(text), "all", rep, 0)
    return RepairedMany(tuple(values), tuple(dict.fromkeys(rep)))


def _text(text: object) -> str:
    if not isinstance(text, str):
        raise JSONRepairError(f"expected model output as str, got {type(text).__name__}")
    return text


def _recover(text: str, want: _Want, rep: list[str], nest: int) -> Any:
    s = text.strip().lstrip("\ufeff")
    if not s:
        raise JSONRepairError("model output is empty")
    if not _unclosed(s, 0):  # fast path: valid JSON costs one C-level parse
        try:
            value = DECODER.decode(s)
        except (ValueError, RecursionError):
            pass
        else:
            return _accept(value, want, rep, nest)
    openers = "{" if want == "object" else "{["
    # A thinking block comes before the JSON; a "</think>" after its first bracket is inside a string.
    answer = _strip_think(s) if _thinks_first(s, openers) else s
    if answer != s and any(ch in answer for ch in openers):  # else the only value is inside the thinking
        s = answer
        rep.append("strip_think")
    s = _strip_fence(s, rep, openers)
    if want == "object" and _ARRAY_START.match(s):  # "[TOOL_CALLS] {...}" is a prefix, "[{...}]" an array
        raise JSONRepairError("model output is a JSON array, not an object")
    if s[:1] == '"' and _opens(s[1:].lstrip(), openers):
        value, _, closed = read_string(s, 0, "top", rep)
        rep.append("decode_string")
        if not closed:
            rep.append("close_string")
        return _nested(value, want, rep, nest)
    start = _find_start(s, 0, want)
    if start < 0:
        raise JSONRepairError(f"model output contains no JSON {'object' if want == 'object' else 'object or array'}")
    error: JSONRepairError | None = None
    for _ in range(3):  # a few candidate starts: prose may hold a "{" before the real object
        try:
            return _from(s, start, want, rep, nest)
        except NothingFound as exc:
            error = exc
        start = _find_start(s, start + 1, want)
        if start < 0:
            break
    raise JSONRepairError(str(error))


def _opens(s: str, openers: str) -> bool:
    return s[:1] != "" and s[0] in openers


def _accept(value: object, want: _Want, rep: list[str], nest: int) -> Any:
    if isinstance(value, str) and _opens(value.lstrip(), "{" if want == "object" else "{["):
        rep.append("decode_string")
        return _nested(value, want, rep, nest)
    if isinstance(value, dict) or (isinstance(value, list) and want != "object"):
        _decode_value(value, rep, nest)
        if want == "all":
            return [value]
        if want == "array" and isinstance(value, dict):
            rep.append("wrap_array")
            return [value]
        return value
    raise JSONRepairError(f"model output is a JSON {type(value).__name__}, not {_WHAT[want]}")


def _nested(text: str, want: _Want, rep: list[str], nest: int) -> Any:
    if nest >= _MAX_NEST:
        raise JSONRepairError("value is JSON-encoded inside a string too many times")
    return _recover(text, want, rep, nest + 1)


def _decode_value(value: dict | list, rep: list[str], nest: int) -> None:
    if type(value) is dict:
        _decode_args(value, rep, nest, 0)
        return
    for item in value:  # a list of calls
        if type(item) is dict:
            _decode_args(item, rep, nest, 0)


def _decode_args(obj: dict, rep: list[str], nest: int, level: int) -> None:
    # Models often emit the arguments as a string of JSON; a tool call needs the object.
    for key, val in obj.items():
        if isinstance(val, str) and key in _ARG_KEYS and val.lstrip()[:1] == "{" and nest < _MAX_NEST:
            sub: list[str] = []
            try:
                obj[key] = _recover(val, "object", sub, nest + 1)
            except JSONRepairError:
                continue  # leave it as text; schema validation reports it
            rep.append("decode_nested_json")
            rep.extend(sub)
        elif isinstance(val, dict) and level < 2:
            _decode_args(val, rep, nest, level + 1)


def _from(s: str, start: int, want: _Want, rep: list[str], nest: int) -> Any:
    """The value at s[start] and, for repair_all or objects where an array was expected, the values
    written back to back after it."""
    sub = ["strip_prefix"] if start else []
    value, end = _c_value(s, start)
    fast = value is not None
    if not fast:
        if _ESCAPED_START.match(s, start):
            s, start = _unescape(s[start:]), 0
            sub.append("unescape_json")
        s = _cut_at_token(s, start, sub)
        value, end = parse_container(s, start, sub)
    values = [value]
    if want == "all" or (want == "array" and type(value) is dict):
        s, end = _more(s, end, values, want == "all", not fast, sub)
        if want == "array":
            sub.append("wrap_array")
        if len(values) > 1:
            sub.append("split_objects")
        value = values
    if s[end:].strip():
        sub.append("strip_suffix")
        if _NEXT_TURN.match(s, end):
            sub.append("strip_next_turn")
    rep.extend(sub)
    for item in values:
        _decode_value(item, rep, nest)
    return value


def _c_value(s: str, start: int) -> tuple[Any, int]:
    """The object or array at s[start] if it is valid JSON (C speed), else (None, start)."""
    if _unclosed(s, start):
        return None, start
    try:
        value, end = DECODER.raw_decode(s, start)
    except (ValueError, RecursionError):
        return None, start
    if type(value) is dict and MORE_MEMBERS.match(s, end):  # {"a": 1}, "b": 2}: closed too early
        return None, start
    return value, end


def _unclosed(s: str, start: int) -> bool:
    """Whether the object or array at s[start] surely has no end (as a cut-off answer has none): a
    failed C parse raises an exception, which costs a third of repairing the usual short answer."""
    closer = _CLOSERS.get(s[start:start + 1])
    return closer is not None and s.find(closer, start) < 0


_CLOSERS = {"{": "}", "[": "]"}


def _cut_at_token(s: str, start: int, rep: list[str]) -> str:
    """The text up to the first leaked chat token after start: what follows it is no JSON the model
    meant (the repairing parser would take it into an unclosed string)."""
    cut = _special_token(s, start)
    if cut < 0:
        return s
    rep.append("strip_special_token")
    if _NEXT_TURN.match(s, cut):
        rep.append("strip_next_turn")
    return s[:cut].rstrip()


def _more(s: str, end: int, values: list, arrays_too: bool, cut: bool, rep: list[str]) -> tuple[str, int]:
    """Append the values that follow s[end] back to back; return the text (cut at a leaked chat token
    once one needs the repairing parser, unless ``cut`` says it is already) and the end of the last."""
    c_ok = True
    while True:
        k = _SEPARATORS.match(s, end).end()
        if k >= len(s) or not (s[k] == "{" or (arrays_too and _ARRAY_START.match(s, k))):
            return s, end
        if len(values) >= MAX_VALUES:
            raise JSONRepairError(f"more than {MAX_VALUES} JSON values written back to back")
        value = None
        if c_ok:
            value, stop = _c_value(s, k)
            c_ok = value is not None  # a failed C call costs O(position): one is enough
        if value is None:
            if not cut:
                s, cut = _cut_at_token(s, k, rep), True
            sub: list[str] = []
            try:
                value, stop = parse_container(s, k, sub)
            except JSONRepairError as exc:  # dropped with the rest; a broken call is reported as one
                if not isinstance(exc, NothingFound):
                    rep.append("drop_broken_value")
                return s, end
            rep.extend(sub)
        values.append(value)
        end = stop


def _find_start(s: str, pos: int, want: _Want) -> int:
    """Index of the first "{" (or array start, unless only objects are wanted) at or after pos, or -1."""
    brace = s.find("{", pos)
    if want == "object":
        return brace
    limit = len(s) if brace < 0 else brace
    p = s.find("[", pos, limit)
    while p >= 0:
        if _ARRAY_START.match(s, p):
            return p
        p = s.find("[", p + 1, limit)
    return brace


def _unescape(s: str) -> str:
    try:
        return json.loads(f'"{s}"', strict=False)
    except ValueError:
        return re.sub(r'\\(["\\/])', r"\1", s)


# "[" starts an array when a value follows it; "[TOOL_CALLS]" or "[INST]" are prefixes, not arrays.
_ARRAY_START = re.compile(r"""\[\s*(?:[\[{"'\u201c\]\d-]|(?:true|false|null|True|False|None)\b)""")
_ESCAPED_START = re.compile(r'(?:\[\s*)?\{?\s*\\"')  # {\"a\": 1} or [{\"a\": 1}]
_SEPARATORS = re.compile(r"[\s,;]*")
_SPECIAL = re.compile(r"<\|[A-Za-z0-9_]*\|>")
_OTHER_TOKENS = ("</s>", "[/INST]", "[INST]", "<start_of_turn>", "<end_of_turn>")
# The model went on to write the next turn: after end-of-turn tokens, a turn opens.
_NEXT_TURN = re.compile(
    r"\s*(?:(?:<\|[A-Za-z0-9_]*\|>|</s>|<end_of_turn>)\s*)*"
    r"(?:<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>|\[INST\]|<\|(?:user|assistant|system)\|>|"
    + TURN.pattern
    + ")"
)


def _special_token(s: str, start: int) -> int:
    """Index of the first leaked chat-template token after start (<|im_end|>, <|>, </s>...), or -1."""
    cut = -1
    p = s.find("<|", start)
    while p >= 0:
        if _SPECIAL.match(s, p):
            cut = p
            break
        p = s.find("<|", p + 2)
    for token in _OTHER_TOKENS:
        q = s.find(token, start, len(s) if cut < 0 else cut)
        if q >= 0:
            cut = q
    return cut


def _thinks_first(s: str, openers: str) -> bool:
    tags = [i for i in (s.find("<think"), s.find("</think")) if i >= 0]
    brackets = [i for i in (s.find(ch) for ch in openers) if i >= 0]
    return bool(tags) and (not brackets or min(tags) < min(brackets))


def _strip_think(s: str) -> str:
    for tag in ("think", "thinking"):
        opener, closer = f"<{tag}>", f"</{tag}>"
        c = s.find(closer)
        if c < 0:
            continue
        o = s.find(opener)
        if o < 0 or c < o:  # the opening tag was in the prompt: everything before the closer is thought
            s = s[c + len(closer) :]
        out, pos = [], 0
        while (o := s.find(opener, pos)) >= 0:
            out.append(s[pos:o])
            c = s.find(closer, o)
            pos = len(s) if c < 0 else c + len(closer)
        s = ("".join(out) + s[pos:]).strip()
    return s


def _strip_fence(s: str, rep: list[str], openers: str) -> str:
    fence = s.find("```")
    if fence < 0:
        return s
    brace = s.find("{")
    if 0 <= brace < fence:  # the object comes first: a fence after it is trailing junk
        if s.endswith("```"):
            rep.append("strip_fence")
            return s[:-3].rstrip("`").rstrip()
        return s
    while fence >= 0:  # take the first fenced block that holds an object (or array)
        body = _FENCE_LANG.match(s, fence + 3).end()
        end = s.find("```", body)
        block = s[body:] if end < 0 else s[body:end]
        if any(ch in block for ch in openers):
            rep.append("strip_fence")
            return block.strip()
        fence = -1 if end < 0 else s.find("```", end + 3)
    return s


_FENCE_LANG = re.compile(r"`*[A-Za-z0-9_+-]*")
