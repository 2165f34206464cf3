"""Recover the JSON object a local model meant to write.

Small models break JSON in a few recurring ways: they stop mid-output (max_tokens), wrap the object in
prose, markdown fences or ``<think>`` blocks, write Python or JavaScript instead of JSON, leak stop
tokens, or forget quotes and commas. :func:`repair` undoes those mistakes and says which ones it
undid; it refuses (``JSONRepairError``) whenever a fix would mean inventing a value.

Valid JSON goes straight through the C decoder (``strict=False``, so raw newlines inside strings are
accepted, as in MemGPT); a valid object with text around it costs one more C call. Anything else goes
to the single-pass, explicit-stack parser in :mod:`llmproxy._json_scan`: linear in the input, no
recursion, nesting capped at ``MAX_DEPTH`` (an error beyond it). At most three ``{`` are tried as the
start when the first ones hold only prose.

Repair names (``Repaired.repairs``, in the order they first fired):

* ``strip_think`` – removed ``<think>``/``<thinking>`` blocks (or everything up to a stray closing tag;
  kept when the only object is inside the thinking)
* ``strip_fence`` – took the body of a markdown ````` fence, or dropped a trailing fence
* ``strip_prefix`` / ``strip_suffix`` – dropped text before / after the object (the FIRST object wins
  when two are written back to back)
* ``strip_special_token`` – cut the text at a leaked chat token such as ``<|im_end|>``, ``<|>``, ``</s>``
* ``decode_string`` – the whole output was a JSON string holding the object
* ``unescape_json`` – the object was written with escaped quotes: ``{\\"a\\": 1}``
* ``decode_nested_json`` – an arguments field (``params``, ``arguments``, ...) held the object as a string
* ``strip_comment`` – removed ``//``, ``/* */`` or ``#`` comments
* ``drop_trailing_comma`` / ``drop_extra_comma`` – ``[1,]`` / ``[1,,2]``
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
* ``fix_number`` – ``+1``, ``.5``, ``1.``, ``007``, a number cut after its ``e``
* ``nonfinite_to_null`` – ``NaN``/``Infinity`` (and overflowing numbers) become ``null``: JSON cannot
  carry them and the arguments are re-serialised for OpenAI clients that would reject them
* ``skip_garbage`` – skipped text where a key was expected (e.g. junk lines after a valid prefix)

Refused: empty text, text without ``{``, a top-level array/number/string that is not an encoded
object, a key with no value (``{"a": 1, "b":}``, ``{"message"``, ``{"function":``), and objects from
which nothing was recovered (``{I think the user wants help}``, a lone ``{``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from llmproxy._json_scan import DECODER, MAX_DEPTH, MORE_MEMBERS, NothingFound, parse_object, read_string
from llmproxy.errors import JSONRepairError

__all__ = ["MAX_DEPTH", "Repaired", "repair", "repair_json"]

_MAX_NEST = 2  # how many times an object may be found JSON-encoded inside a string
_ARG_KEYS = frozenset({"params", "parameters", "arguments", "args", "kwargs", "input"})


@dataclass(frozen=True)
class Repaired:
    value: dict
    repairs: tuple[str, ...]


def repair_json(text: str) -> dict:
    """Return the JSON object in ``text``; raise ``JSONRepairError`` if none can be honestly recovered."""
    return repair(text).value


def repair(text: str) -> Repaired:
    """Return the recovered object and the names of the repairs it needed (see the module docstring)."""
    if not isinstance(text, str):
        raise JSONRepairError(f"expected model output as str, got {type(text).__name__}")
    rep: list[str] = []
    value = _recover(text, rep, 0)
    return Repaired(value, tuple(dict.fromkeys(rep)))


def _recover(text: str, rep: list[str], nest: int) -> dict:
    s = text.strip().lstrip("\ufeff")
    if not s:
        raise JSONRepairError("model output is empty")
    try:  # fast path: valid JSON costs one C-level parse
        value = DECODER.decode(s)
    except (ValueError, RecursionError):
        pass
    else:
        return _accept(value, rep, nest)
    answer = _strip_think(s)
    if answer != s and "{" in answer:  # else the only object is inside the thinking: take that one
        s = answer
        rep.append("strip_think")
    s = _strip_fence(s, rep)
    if _ARRAY_START.match(s):  # "[TOOL_CALLS] {...}" is a prefix, "[{...}]" an array
        raise JSONRepairError("model output is a JSON array, not an object")
    if s[:1] == '"' and s[1:].lstrip()[:1] == "{":
        value, _, closed = read_string(s, 0, "top", rep)
        rep.append("decode_string")
        if not closed:
            rep.append("close_string")
        return _nested(value, rep, nest)
    start = s.find("{")
    if start < 0:
        raise JSONRepairError("model output contains no JSON object")
    error: JSONRepairError | None = None
    for _ in range(3):  # a few candidate starts: prose may hold a "{" before the real object
        try:
            return _from(s, start, rep, nest)
        except NothingFound as exc:
            error = exc
        start = s.find("{", start + 1)
        if start < 0:
            break
    raise JSONRepairError(str(error))


def _accept(value: object, rep: list[str], nest: int) -> dict:
    if isinstance(value, dict):
        _decode_args(value, rep, nest, 0)
        return value
    if isinstance(value, str) and value.lstrip()[:1] == "{":
        rep.append("decode_string")
        return _nested(value, rep, nest)
    raise JSONRepairError(f"model output is a JSON {type(value).__name__}, not an object")


def _nested(text: str, rep: list[str], nest: int) -> dict:
    if nest >= _MAX_NEST:
        raise JSONRepairError("object is JSON-encoded inside a string too many times")
    return _recover(text, rep, nest + 1)


def _decode_args(obj: dict, rep: list[str], nest: int, level: int) -> None:
    # Models often emit the arguments as a string of JSON; a tool call needs the object.
    for key, val in obj.items():
        if isinstance(val, str) and key in _ARG_KEYS and val.lstrip()[:1] == "{" and nest < _MAX_NEST:
            sub: list[str] = []
            try:
                obj[key] = _recover(val, sub, nest + 1)
            except JSONRepairError:
                continue  # leave it as text; schema validation reports it
            rep.append("decode_nested_json")
            rep.extend(sub)
        elif isinstance(val, dict) and level < 2:
            _decode_args(val, rep, nest, level + 1)


def _from(s: str, start: int, rep: list[str], nest: int) -> dict:
    sub: list[str] = []
    try:  # a valid object with text around it is still C-speed work
        value, end = DECODER.raw_decode(s, start)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, dict) and not MORE_MEMBERS.match(s, end):
            if start:
                rep.append("strip_prefix")
            if s[end:].strip():
                rep.append("strip_suffix")
            _decode_args(value, rep, nest, 0)
            return value
    if start:
        sub.append("strip_prefix")
    if re.match(r'\{\s*\\"', s[start : start + 64]):
        s, start = _unescape(s[start:]), 0
        sub.append("unescape_json")
    cut = _special_token(s, start)
    if cut >= 0:
        s = s[:cut].rstrip()
        sub.append("strip_special_token")
    value, end = parse_object(s, start, sub)
    if s[end:].strip():
        sub.append("strip_suffix")
    rep.extend(sub)
    _decode_args(value, rep, nest, 0)
    return value


def _unescape(s: str) -> str:
    try:
        return json.loads(f'"{s}"', strict=False)
    except ValueError:
        return re.sub(r'\\(["\\/])', r"\1", s)


_ARRAY_START = re.compile(r"\[\s*(?:[\[{\"\]\d-]|true|false|null)")
_SPECIAL = re.compile(r"<\|[A-Za-z0-9_]*\|>")


def _special_token(s: str, start: int) -> int:
    """Index of the first leaked chat-template token after start (<|im_end|>, <|>, </s>...), or -1."""
    cut = -1
    p = s.find("<|", start)
    while p >= 0:
        if _SPECIAL.match(s, p):
            cut = p
            break
        p = s.find("<|", p + 2)
    for token in ("</s>", "[/INST]"):
        q = s.find(token, start, len(s) if cut < 0 else cut)
        if q >= 0:
            cut = q
    return cut


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


def _strip_fence(s: str, rep: list[str]) -> str:
    fence = s.find("```")
    if fence < 0:
        return s
    brace = s.find("{")
    if 0 <= brace < fence:  # the object comes first: a fence after it is trailing junk
        if s.endswith("```"):
            rep.append("strip_fence")
            return s[:-3].rstrip("`").rstrip()
        return s
    while fence >= 0:  # take the first fenced block that holds an object
        body = _FENCE_LANG.match(s, fence + 3).end()
        end = s.find("```", body)
        block = s[body:] if end < 0 else s[body:end]
        if "{" in block:
            rep.append("strip_fence")
            return block.strip()
        fence = -1 if end < 0 else s.find("```", end + 3)
    return s


_FENCE_LANG = re.compile(r"`*[A-Za-z0-9_+-]*")
