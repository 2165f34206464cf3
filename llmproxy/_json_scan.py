"""The repairing JSON parser behind :mod:`llmproxy.repair`.

One pass over the text with an explicit stack (no recursion, nesting capped at ``MAX_DEPTH``). Intact
pieces go to C: strings without backslashes are sliced, numbers and literals go through the json
module's scanner, and runs of simple ``"key": scalar,`` members or ``scalar,`` items are decoded in
one ``json`` call. Every regex here is either a single character-class run or a loop whose steps
cannot overlap, so scanning stays linear. Repairs are appended to the ``rep`` list by name (see
:mod:`llmproxy.repair` for the list).
"""

from __future__ import annotations

import json
import re

from llmproxy.errors import JSONRepairError

MAX_DEPTH = 500  # deeper than any tool call; json.dumps of the result still fits Python's stack

class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> None:
    # NaN/Infinity leave the C fast path; the parser below turns them into null and reports it.
    raise _NonFinite(name)


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):  # 1e999: same treatment as Infinity
        raise _NonFinite(text)
    return value


_INF = float("inf")
DECODER = json.JSONDecoder(strict=False, parse_constant=_reject_constant, parse_float=_parse_float)


class NothingFound(JSONRepairError):
    """The candidate object held nothing recoverable; a later ``{`` may still hold the answer."""



_KEY, _COLON, _VALUE, _AFTER = range(4)
# '"name":' ahead: a key starts here, so whatever string we are in should have ended already.
_KEY_TAIL = r'[\w $.\-]{1,64}"\s*:'
_KEY_AHEAD = re.compile('"' + _KEY_TAIL)
MORE_MEMBERS = re.compile(r'\s*,\s*"' + _KEY_TAIL)  # {"a": 1}, "b": 2} closed too early
_QUOTES = "\"'\u201c\u201d"
_WS = re.compile(r"\s*")
_COMMENTS = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*|/\*[\s\S]*?(?:\*/|\Z))*")
_JUNK = re.compile("[^\"\u201c}\\]]*")
_BARE_KEY = re.compile(r"([\w$][\w$.\-]*)\s*:")
_WORD = re.compile(r"\w+")
_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d*)?")
_STRICT_NUM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
# A bare value in an object runs to the end of the line or container; a comma ends it only when a new
# member follows ("message": Hello there, friend!} keeps its comma).
_BARE_IN_OBJ = re.compile(
    "(?:[^,}\\]\\n\\r\"]+|\"(?!" + _KEY_TAIL + ")"
    "|,(?!\\s*(?:[\"'\u201c}\\]]|\\Z|[\\w$-]+\\s*:)|[ \\t]*[\\r\\n]))*"
)
_BARE_IN_ARR = re.compile(r"[^,}\]\n\r]*")
# Runs of intact "key": scalar, / scalar, pieces are handed to the C decoder in one go, so a long
# truncated list or object costs one regex match and one json call, not a trip round the loop per item.
_SCALAR = r'(?:"[^"\\]*(?:\\[\s\S][^"\\]*)*"|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)'
_SCALAR_START = '"-0123456789tfn'
_RUN_IN_ARR = re.compile(r"(?:\s*" + _SCALAR + r"\s*,)*")
_RUN_IN_OBJ = re.compile(
    r'(?:\s*"[^"\\]*(?:\\[\s\S][^"\\]*)*"\s*:\s*' + _SCALAR + r'\s*,(?=\s*["}]|[ \t]*[\r\n]))*'
)
_LITERALS = {"true": True, "false": False, "null": None, "none": None, "undefined": None,
             "nan": None, "infinity": None, "inf": None}  # fmt: skip
_NONFINITE = ("nan", "infinity", "inf")


def _body(q: str, ctx: str) -> re.Pattern[str]:
    # Scan a string body in C. A quote that cannot end the string (judging by what follows it, see
    # _closes) is absorbed here too, so hostile runs of quotes never reach the Python loop.
    follows = {
        "key": None,
        "obj": "(?!" + _KEY_TAIL + ")(?:\\s*[^\\s,}\\]/\"\u201c]|[ \\t]*[\"\u201c])",
        "arr": "\\s*[^\\s,}\\]/\"\u201c]",
        "top": "\\s*\\S",
    }[ctx]
    plain = f"[^{q}\\\\]*"
    inner = "\\\\[\\s\\S]" if follows is None else f"\\\\[\\s\\S]|{q}(?={follows})"
    return re.compile(f"{plain}(?:(?:{inner}){plain})*")


_BODIES = {(q, c): _body(q, c) for q in "\"'\u201d" for c in ("key", "obj", "arr", "top")}
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)((?:\\\\)*)"')
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\s\S])")
_scanstring = json.decoder.scanstring


def _closes(s: str, j: int, ctx: str) -> bool:
    """Does the quote at s[j] end the string? Models leave inner quotes unescaped: He said "hi"."""
    n = len(s)
    k = _WS.match(s, j + 1).end()
    if k >= n:
        return True
    c = s[k]
    if ctx == "top":
        return False
    if c in "}]":
        return True
    if c == ",":
        if ctx == "arr":
            return True
        k2 = _WS.match(s, k + 1).end()
        return (k2 >= n or s[k2] in "\"'\u201c}]{[" or "\n" in s[k + 1 : k2] or bool(_BARE_KEY.match(s, k2))
                or s.startswith(("//", "/*"), k2))
    if c in '"\u201c':  # another string: a missing comma, if it starts a new line (or an array item)
        return ctx == "arr" or "\n" in s[j + 1 : k]
    return s.startswith(("//", "/*"), k)


def _missing_close(s: str, i: int, j: int) -> int:
    """A key starts at s[j] inside a string value begun before i: where did the value end? -1: it didn't.

    Only after a comma, a line break or a stray quote ("a, "b": 1 / "a""b": 1); otherwise text
    such as  He said "hi": yes  stays one string.
    """
    k = j - 1
    while k >= i and s[k] in " \t":
        k -= 1
    if k >= i - 1 and s[k] in ',\n\r"':
        return k
    return -1


def read_string(s: str, i: int, ctx: str, rep: list[str], stack: list | None = None) -> tuple[str, int, bool]:
    """Read the string starting at s[i]; return (value, index after it, whether it was closed).

    ``stack`` (the open containers) lets a string that runs to the end give back the closers the
    model typed after forgetting its closing quote.
    """
    q = s[i]
    close = "\u201d" if q in "\u201c\u201d" else q
    if q != '"':
        rep.append("single_quotes" if q == "'" else "smart_quotes")  # “...” (or ”...”)
    body = _BODIES[close, ctx].match
    n = len(s)
    parts = []
    i += 1
    while True:
        j = body(s, i).end()
        parts.append(s[i:j])
        if j >= n or s[j] == "\\":  # ran off the end (a lone trailing backslash is a cut escape)
            closed, i = False, n
            break
        if ctx == "key" or _closes(s, j, ctx):
            closed, i = True, j + 1
            break
        if ctx == "obj" and close == '"' and _KEY_AHEAD.match(s, j):
            k = _missing_close(s, i, j)
            if k >= 0:  # "New York, "gender": ...: the string ended at k; resume at the key
                rep.append("close_string")
                if k < i:  # the quote that ended it was the opening one, or one kept as text below
                    del parts[-2:]
                else:
                    parts[-1] = s[i:k]
                closed, i = True, j
                break
        rep.append("escape_inner_quote")
        parts.append('\\"' if close == '"' else close)
        i = j + 1
    raw = "".join(parts)
    if close == '"' and ctx != "key" and '"' in raw:  # quotes absorbed by the body pattern
        escaped = _escape_quotes(raw)
        if len(escaped) != len(raw):
            rep.append("escape_inner_quote")
            raw = escaped
    if not closed and stack:
        raw = _cut_closers(raw, stack)
    return _decode(raw, close, rep), i, closed


def _cut_closers(raw: str, stack: list) -> str:
    """``"hello}}`` with two objects open: the model forgot the quote, not the braces. Else keep all
    (code cut after a ``}`` keeps it)."""
    k = len(raw)
    for container in stack:  # the last character closes the outermost container
        while k and raw[k - 1] in " \t\r\n":
            k -= 1
        if not k or raw[k - 1] != ("}" if type(container) is dict else "]"):
            return raw
        k -= 1
    return raw[:k].rstrip(" \t\r\n")


def _escape_quotes(raw: str) -> str:
    """Escape the bare quotes in a string body, leaving its escape sequences alone (C-speed replaces)."""
    if "\0" in raw:
        return _UNESCAPED_QUOTE.sub(r'\1\\"', raw)
    protected = raw.replace("\\\\", "\0\1").replace('\\"', "\0\2")
    return protected.replace('"', '\\"').replace("\0\2", '\\"').replace("\0\1", "\\\\")


def _decode(raw: str, close: str, rep: list[str]) -> str:
    if close != '"':  # a '...' or “...” body may hold bare double quotes
        raw = _escape_quotes(raw)
    try:
        return _scanstring(raw + '"', 0, False)[0]
    except ValueError:
        pass
    try:
        return _scanstring(_fix_escapes(raw, close, rep) + '"', 0, False)[0]
    except ValueError as exc:  # pragma: no cover - every escape was normalised
        raise JSONRepairError(f"cannot decode string: {exc}") from None


def _fix_escapes(raw: str, close: str, rep: list[str]) -> str:
    bad = False

    def fix(m: re.Match[str]) -> str:
        nonlocal bad
        g = m.group(1)
        if len(g) == 5 or g in '"\\/bfnrt':
            return m.group(0)
        if g == "'" and close == "'":
            return g
        bad = True
        # \d, \w, C:\Users: keep the backslash as text; \_ \' \$: markdown-style escapes, drop it
        return "\\\\" + g if g.isalnum() else g

    fixed = _ESCAPE.sub(fix, raw)
    if bad:
        rep.append("fix_escape")
    return fixed


def _number(t: str, rep: list[str]) -> object:
    if not _STRICT_NUM.fullmatch(t):
        rep.append("fix_number")
    core = t.rstrip("eE+-")  # "1e", "2e-": cut after the exponent mark
    try:
        value = float(core) if any(ch in core for ch in ".eE") else int(core)
    except ValueError:  # more digits than int() accepts
        value = float(core)
    if isinstance(value, float) and (value != value or value in (_INF, -_INF)):
        rep.append("nonfinite_to_null")
        return None
    return value


def _scalar(s: str, i: int, in_obj: bool, rep: list[str]) -> tuple[object, int]:
    """Read a number, literal or bare (unquoted) value at s[i]."""
    n = len(s)
    c = s[i]
    if c in "-+.0123456789":
        if c in "-+" and s.startswith("Infinity", i + 1):
            rep.append("nonfinite_to_null")
            return None, i + 9
        m = _NUM.match(s, i)
        if m and (m.end() >= n or not (s[m.end()].isalnum() or s[m.end()] in "_.-:")):
            return _number(m.group(), rep), m.end()
    elif c.isalpha() or c == "_":
        j = _WORD.match(s, i).end()
        low = s[i:j].lower()
        k = _WS.match(s, j).end()
        if low in _LITERALS and (k >= n or s[k] in ",}]\"'/#" or "\n" in s[j:k]):
            if low in _NONFINITE:
                rep.append("nonfinite_to_null")
            elif s[i:j] != low or low in ("none", "undefined"):
                rep.append("normalize_literal")
            return _LITERALS[low], j
        if j >= n:
            for word in ("true", "false", "null"):
                if word.startswith(low):
                    rep.append("complete_literal")
                    return _LITERALS[word], j
    j = (_BARE_IN_OBJ if in_obj else _BARE_IN_ARR).match(s, i).end()
    rep.append("quote_value")
    return s[i:j].rstrip(), j


def parse_object(s: str, start: int, rep: list[str]) -> tuple[dict, int]:
    """Parse the object at s[start] (a "{"), repairing as it goes; return it and the index after it."""
    n = len(s)
    ws = _WS.match
    # C: reads one number or literal. Not used on strings: its errors cost O(position) to build.
    scan = DECODER.scan_once
    root: dict = {}
    stack: list = [root]
    keys: list = [None]
    top, in_obj = root, True
    open_objs, open_arrs = 1, 0  # to tell a mismatched closer from a stray one in O(1)
    state, comma = _KEY, False
    skipping = False  # junk was skipped where this member's key belongs: a key without ":" is junk too
    bulk_from = 0  # no bulk attempt before this index (one failed over it already)
    i = start + 1
    while True:
        i = ws(s, i).end()
        if i >= n:
            break
        if i >= bulk_from and (
            (state == _KEY and s[i] == '"') if in_obj else (state == _VALUE and s[i] in _SCALAR_START)
        ):
            j = (_RUN_IN_OBJ if in_obj else _RUN_IN_ARR).match(s, i).end()
            if j > i:
                run = ("{" if in_obj else "[") + s[i : j - 1] + ("}" if in_obj else "]")  # drop last ","
                try:
                    items = DECODER.decode(run)
                except ValueError:
                    try:  # invalid escapes such as \_ (the run's quotes are all real delimiters)
                        fixes: list[str] = []
                        items = DECODER.decode(_fix_escapes(run, '"', fixes))
                        rep.extend(fixes)
                    except ValueError:  # NaN, 1e999...: let the loop below repair it item by item
                        items = None
                        bulk_from = j
                if items is not None:
                    if in_obj:
                        top.update(items)
                    else:
                        top.extend(items)
                    i, comma = j, True
                    continue
        c = s[i]
        if c in "/#":
            j = _COMMENTS.match(s, i).end()
            if j > i:
                rep.append("strip_comment")
                i = j
                continue
        if c in "}]":
            if state == _COLON and skipping:
                state = _KEY
            if state == _COLON or (state == _VALUE and in_obj):
                raise JSONRepairError(f"key {keys[-1]!r} has no value")
            if comma:
                rep.append("drop_trailing_comma")
            want = dict if c == "}" else list
            i += 1
            if type(top) is not want:
                rep.append("fix_bracket")
                if not (open_objs if c == "}" else open_arrs):
                    continue  # a stray closer
                while type(stack[-1]) is not want:  # close the inner containers it skipped
                    open_objs, open_arrs = _pop(stack, keys, open_objs, open_arrs)
            open_objs, open_arrs = _pop(stack, keys, open_objs, open_arrs)
            if not stack and MORE_MEMBERS.match(s, i):
                rep.append("fix_bracket")  # the object was closed too early: reopen it
                stack, keys, open_objs = [root], [None], 1
            if not stack:
                if not root:
                    raise NothingFound("no JSON object in the output, only text in braces")
                return root, i
            top = stack[-1]
            in_obj = type(top) is dict
            state, comma, skipping = _AFTER, False, False
            continue
        if state == _VALUE:
            if c == ",":
                if in_obj:
                    raise JSONRepairError(f"key {keys[-1]!r} has no value")
                rep.append("drop_extra_comma")
                i += 1
                continue
            comma = False
            if c == "{" or c == "[":
                if len(stack) >= MAX_DEPTH:
                    raise JSONRepairError(f"JSON nested deeper than {MAX_DEPTH} levels")
                new: dict | list = {} if c == "{" else []
                if in_obj:
                    top[keys[-1]] = new
                else:
                    top.append(new)
                stack.append(new)
                keys.append(None)
                top, in_obj = new, c == "{"
                if in_obj:
                    open_objs += 1
                    state = _KEY
                else:
                    open_arrs += 1
                i += 1
                continue
            ctx = "obj" if in_obj else "arr"
            if c == '"':
                j = _plain_string_end(s, i)
                if j and _closes(s, j - 1, ctx):
                    value = s[i + 1 : j - 1]
                else:
                    j = 0
            elif c in _SCALAR_START:
                try:
                    value, j = scan(s, i)
                except (StopIteration, ValueError):
                    j = 0
                if j and not (j >= n or s[j] in ",}]" or _ends_scalar(s, j)):
                    j = 0
            else:
                j = 0
            if j:
                i = j
            elif c in _QUOTES:
                value, i, closed = read_string(s, i, ctx, rep, stack)
                if not closed:
                    rep.append("close_string")
            else:
                value, i = _scalar(s, i, in_obj, rep)
            if in_obj:
                top[keys[-1]] = value
            else:
                top.append(value)
            if i < n and s[i] == ",":  # the usual case, without another trip round the loop
                state, comma = (_KEY if in_obj else _VALUE), True
                i += 1
            else:
                state = _AFTER
            continue
        if state == _AFTER:
            if c == ",":
                state, comma = (_KEY if in_obj else _VALUE), True
                i += 1
            elif not in_obj:
                rep.append("insert_comma")
                state = _VALUE
            else:
                if c in _QUOTES or _BARE_KEY.match(s, i):
                    rep.append("insert_comma")
                state = _KEY
            continue
        if state == _KEY:
            j = _plain_string_end(s, i) if c == '"' else 0
            if j:
                key = s[i + 1 : j - 1]
            elif c in _QUOTES:
                key, j, closed = read_string(s, i, "key", rep)
                if not closed:
                    rep.append("drop_truncated_key")
                    comma = False
                    break
            elif m := _BARE_KEY.match(s, i):
                rep.append("quote_key")
                keys[-1], state, comma = m.group(1), _VALUE, False
                i = m.end()
                continue
            elif c == ",":
                rep.append("drop_extra_comma")
                i += 1
                continue
            else:  # prose or junk where a key belongs: skip to something that can start a member
                rep.append("skip_garbage")
                skipping = True
                i = _JUNK.match(s, i).end()
                continue
            keys[-1], comma = key, False
            i = ws(s, j).end()
            if i < n and s[i] == ":":  # the usual case, without another trip round the loop
                state, skipping = _VALUE, False
                i += 1
            else:
                state = _COLON
            continue
        # state == _COLON
        if c == ":":
            state, skipping = _VALUE, False
            i += 1
        elif skipping:  # a quoted word inside junk ("GARBAGE "x" GARBAGE"): more junk
            state = _KEY
            i = _JUNK.match(s, i).end()
        else:
            raise JSONRepairError(f"key {keys[-1]!r} has no value")
    # End of text with containers still open: the output was cut off.
    if (state == _COLON and not skipping) or (state == _VALUE and in_obj):
        raise JSONRepairError(f"key {keys[-1]!r} has no value (output ends after it)")
    if comma:
        rep.append("drop_trailing_comma")
    rep.append("close_brackets")
    if not root:
        raise NothingFound("nothing recoverable in the output (it ends before the first member)")
    return root, n


def _plain_string_end(s: str, i: int) -> int:
    """End of the "..." at s[i] if it has no backslash (the common case: no decoding needed), else 0."""
    j = s.find('"', i + 1)
    if j < 0 or s.find("\\", i + 1, j) >= 0:
        return 0
    return j + 1


def _ends_scalar(s: str, j: int) -> bool:
    """Does the number or literal the C scanner read end at j? (Not "12px", not "true story".)"""
    k = _WS.match(s, j).end()
    return k >= len(s) or s[k] in ",}]\"'/#\u201c" or "\n" in s[j:k]


def _pop(stack: list, keys: list, open_objs: int, open_arrs: int) -> tuple[int, int]:
    keys.pop()
    if type(stack.pop()) is dict:
        return open_objs - 1, open_arrs
    return open_objs, open_arrs - 1
