"""The repairing JSON parser behind :mod:`llmproxy.repair._repairer`.

One pass over the text with an explicit stack (no recursion, nesting capped at ``MAX_DEPTH``), from
the ``{`` or ``[`` that opens an object or array to the bracket that closes it. Intact pieces go to
C: strings without backslashes are sliced, numbers and literals go through the json module's scanner,
and runs of simple ``"key": scalar,`` members or ``scalar,`` items are decoded in one ``json`` call. Every regex here is either a single character-class run or a loop whose steps
cannot overlap, so scanning stays linear. Repairs are appended to the ``rep`` list by name (see
:mod:`llmproxy.repair._repairer` for the list).
"""

from __future__ import annotations

import json
import re

from llmproxy.errors import JSONRepairError

MAX_DEPTH = 500  # deeper than any tool call; json.dumps of the result still fits Python's stack
_WINDOW = 512  # how much text a C try on a nested container reads
_C_DEPTH = MAX_DEPTH - _WINDOW // 2  # a window holds at most this many more levels

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
_BARE_IN_TUPLE = re.compile(r"[^,})\]\n\r]*")
_BARE = {"obj": _BARE_IN_OBJ, "arr": _BARE_IN_ARR, "tup": _BARE_IN_TUPLE}
# Python's (1, 2): only when an item that looks like a value follows, so "(see above)" stays text.
_TUPLE_START = re.compile(r"""\(\s*(?:[\[{(\"'\u201c\d.+-]|\)|(?:True|False|None|true|false|null)\b)""")
_GROUPED_NUM = re.compile(r"[-+]?\d+(?:_\d+)+(?:\.\d+(?:_\d+)*)?(?:[eE][-+]?\d+(?:_\d+)*)?")  # Python's 1_000
# "..." or "…" standing for items the model left out (a run of them, comma-separated, is one match).
_ELLIPSES = re.compile(r"(?:\.{3,}|\u2026)(?:\s*,\s*(?:\.{3,}|\u2026))*")
# A line where the model starts the next chat turn itself ("User: ...", "### Instruction:"). An
# unquoted key followed by a value (User: "bob") is not one.
_ROLES = "User|Human|Assistant|System|USER|HUMAN|ASSISTANT|SYSTEM"
TURN = re.compile(
    r"#{1,4}[ \t]*(?:Instruction|Response|Input|" + _ROLES + r")\b"
    r"|(?:" + _ROLES + r")[ \t]*:(?![ \t]*[\"'\u201c{\[\d])"
)
_TURN_FIRST = "#UHAS"  # what such a line starts with
# Keys whose value names the function: prose there is a refusal written after a forced prefix.
_NAME_KEYS = frozenset({"function", "name", "function_name", "tool", "tool_name"})
_SPACE = re.compile(r"\s")
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
    # Contexts: an object key or value, an array item, a tuple item, the whole text.
    follows = {
        "key": None,
        "obj": "(?!" + _KEY_TAIL + ")(?:\\s*[^\\s,}\\]/\"\u201c]|[ \\t]*[\"\u201c])",
        "arr": "\\s*[^\\s,}\\]/\"\u201c]|[\"\u201c]",
        "tup": "\\s*[^\\s,})\\]/\"\u201c]|[\"\u201c]",
        "top": "\\s*\\S",
    }[ctx]
    plain = f"[^{q}\\\\]*"
    inner = "\\\\[\\s\\S]" if follows is None else f"\\\\[\\s\\S]|{q}(?={follows})"
    return re.compile(f"{plain}(?:(?:{inner}){plain})*")


_BODIES = {(q, c): _body(q, c) for q in "\"'\u201d" for c in ("key", "obj", "arr", "tup", "top")}
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
    if c in "}]" or (c == ")" and ctx == "tup"):
        return True
    if c == ",":
        if ctx != "obj":
            return True
        k2 = _WS.match(s, k + 1).end()
        return (k2 >= n or s[k2] in "\"'\u201c}]{[" or "\n" in s[k + 1 : k2] or bool(_BARE_KEY.match(s, k2))
                or s.startswith(("//", "/*"), k2))
    if c in '"\u201c':  # another string: a missing comma if it starts a new line (in an array: after a space)
        return "\n" in s[j + 1 : k] if ctx == "obj" else k > j + 1
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


def read_string(
    s: str, i: int, ctx: str, rep: list[str], stack: list | None = None, keys: list | None = None
) -> tuple[str, int, bool]:
    """Read the string starting at s[i]; return (value, index after it, whether it was closed).

    ``stack`` and ``keys`` (the open containers and what parse_container keeps beside them) let a
    string that runs to the end give back the closers the model typed after forgetting its quote.
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
    if not closed and stack and keys:
        raw = _cut_closers(raw, stack, keys)
    return _decode(raw, close, rep), i, closed


def _cut_closers(raw: str, stack: list, keys: list) -> str:
    """``"hello}}`` with two objects open: the model forgot the quote, not the braces. Else keep all
    (code cut after a ``}`` keeps it)."""
    k = len(raw)
    for container, key in zip(stack, keys):  # the last character closes the outermost container
        while k and raw[k - 1] in " \t\r\n":
            k -= 1
        if not k or raw[k - 1] != ("}" if type(container) is dict else key):
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
        value = float(core) if "." in core or "e" in core or "E" in core else int(core)
    except ValueError:  # more digits than int() accepts
        value = float(core)
    if isinstance(value, float) and (value != value or value in (_INF, -_INF)):
        rep.append("nonfinite_to_null")
        return None
    return value


def _scalar(s: str, i: int, bare: re.Pattern[str], rep: list[str]) -> tuple[object, int]:
    """Read a number, literal or bare (unquoted) value at s[i]; ``bare`` says where a bare one ends."""
    n = len(s)
    c = s[i]
    if c in "-+.0123456789":
        if c in "-+" and s.startswith("Infinity", i + 1):
            rep.append("nonfinite_to_null")
            return None, i + 9
        m = _NUM.match(s, i)
        grouped = m is not None and m.end() < n and s[m.end()] == "_"
        if grouped:
            m = _GROUPED_NUM.match(s, i)
        if m and (m.end() >= n or not (s[m.end()].isalnum() or s[m.end()] in "_.-:")):
            text = m.group()
            if grouped:
                rep.append("drop_digit_separator")
                text = text.replace("_", "")
            return _number(text, rep), m.end()
    elif c.isalpha() or c == "_":
        j = _WORD.match(s, i).end()
        low = s[i:j].lower()
        k = _WS.match(s, j).end()
        if low in _LITERALS and (k >= n or s[k] in ",}])\"'/#" or "\n" in s[j:k]):
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
    j = bare.match(s, i).end()
    rep.append("quote_value")
    return s[i:j].rstrip(), j


def parse_container(s: str, start: int, rep: list[str]) -> tuple[dict | list, int]:
    """Parse the object or array at s[start] (a "{" or "["), repairing as it goes; return it and the
    index after it, or where the model began a next chat turn inside it."""
    n = len(s)
    ws = _WS.match
    # C: reads one number or literal. Not used on strings: its errors cost O(position) to build.
    scan = DECODER.scan_once
    root: dict | list = {} if s[start] == "{" else []
    stack: list = [root]
    # Beside each open container: an object's current key, or an array's closing bracket ("]", or
    # ")" for a Python tuple read as an array).
    keys: list = [None if type(root) is dict else "]"]
    top, in_obj = root, type(root) is dict
    open_count = {"}": int(in_obj), "]": int(not in_obj), ")": 0}  # a stray closer is found in O(1)
    state, comma = (_KEY if in_obj else _VALUE), False
    skipping = False  # junk was skipped where this member's key belongs: a key without ":" is junk too
    junk_in = None  # the object where junk was last skipped: if it closes empty, it held only prose
    bulk_from = 0  # no bulk attempt before this index (one failed over it already)
    c_from = 0  # no C attempt on a container before this index (one failed over it already)
    stop = n  # where the text ends for this container (a next chat turn ends it early)
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
            if c == "#" and _at_turn(s, i):  # "### Instruction:" is no comment
                stop = i
                break
            j = _COMMENTS.match(s, i).end()
            if j > i:
                rep.append("strip_comment")
                i = j
                continue
        if c in "}]" or (c == ")" and open_count[")"]):
            if state == _COLON and skipping:
                state = _KEY
            if state == _COLON or (state == _VALUE and in_obj):
                raise JSONRepairError(f"key {keys[-1]!r} has no value")
            if comma:
                rep.append("drop_trailing_comma")
            i += 1
            if ("}" if in_obj else keys[-1]) != c:
                rep.append("fix_bracket")
                if not open_count[c]:
                    continue  # a stray closer
                while ("}" if type(stack[-1]) is dict else keys[-1]) != c:  # close the inner ones it skipped
                    _pop(stack, keys, open_count)
            done = stack[-1]
            _pop(stack, keys, open_count)
            if not done and junk_in is done:
                if not stack:
                    raise NothingFound("no JSON object in the output, only text in braces")
                raise JSONRepairError("an object in the output holds only text in braces")
            if not stack and MORE_MEMBERS.match(s, i) and type(root) is dict:
                rep.append("fix_bracket")  # the object was closed too early: reopen it
                stack, keys, open_count["}"] = [root], [None], 1
            if not stack:
                return root, i
            top = stack[-1]
            in_obj = type(top) is dict
            state, comma, skipping = _AFTER, False, False
            if i < n and s[i] == ",":  # the usual case, without another trip round the loop
                state, comma = (_KEY if in_obj else _VALUE), True
                i += 1
            continue
        if state == _VALUE:
            if c == ",":
                if in_obj:
                    raise JSONRepairError(f"key {keys[-1]!r} has no value")
                rep.append("drop_extra_comma")
                i += 1
                continue
            comma = False
            j = 0
            if c == "{" or c == "[":
                if i >= c_from and len(stack) < _C_DEPTH:
                    # A valid container (the usual case) costs one C call on a window of the text.
                    # A failed try costs O(window), so none is made again before the window's end.
                    try:
                        value, j = DECODER.raw_decode(s[i : i + _WINDOW])
                        j += i
                    except (ValueError, RecursionError):
                        c_from = i + _WINDOW
                opens = not j
            else:
                opens = c == "(" and _TUPLE_START.match(s, i) is not None
            if opens:
                if len(stack) >= MAX_DEPTH:
                    raise JSONRepairError(f"JSON nested deeper than {MAX_DEPTH} levels")
                new: dict | list = {} if c == "{" else []
                if in_obj:
                    top[keys[-1]] = new
                else:
                    top.append(new)
                stack.append(new)
                closer = "}" if c == "{" else "]" if c == "[" else ")"
                keys.append(None if c == "{" else closer)
                open_count[closer] += 1
                if c == "(":
                    rep.append("tuple_to_array")
                top, in_obj = new, c == "{"
                if in_obj:
                    state = _KEY
                i += 1
                continue
            if c in ".\u2026" and (j := _ellipsis_end(s, i)):
                if in_obj:  # a placeholder is no value, and no value may be invented
                    raise JSONRepairError(f"key {keys[-1]!r} has only an ellipsis for a value")
                rep.append("drop_ellipsis")
                i, state = j, _AFTER
                continue
            ctx = "obj" if in_obj else "arr" if keys[-1] == "]" else "tup"
            if j:
                pass
            elif c == '"':
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
                if j and not (j >= n or s[j] in ",}])" or _ends_scalar(s, j)):
                    j = 0
            if j:
                i = j
            elif c in _QUOTES:
                value, i, closed = read_string(s, i, ctx, rep, stack, keys)
                if not closed:
                    rep.append("close_string")
            else:
                if c in _TURN_FIRST and _at_turn(s, i):
                    stop = i
                    break
                value, i = _scalar(s, i, _BARE[ctx], rep)
                if in_obj and type(value) is str and keys[-1] in _NAME_KEYS and _SPACE.search(value):
                    if len(stack) == 1 or (len(stack) == 2 and (type(root) is list or keys[0] == "function")):
                        raise JSONRepairError(
                            f"the model wrote text where the function name belongs: {value[:60]!r}"
                        )
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
            elif c in _TURN_FIRST and _at_turn(s, i):
                stop = i
                break
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
                if c in _TURN_FIRST and _at_turn(s, i):
                    stop = i
                    break
                rep.append("quote_key")
                keys[-1], state, comma = m.group(1), _VALUE, False
                i = m.end()
                continue
            elif c == ",":
                rep.append("drop_extra_comma")
                i += 1
                continue
            elif c in ".\u2026" and (j := _ellipsis_end(s, i)):
                rep.append("drop_ellipsis")
                i, state, comma = j, _AFTER, False
                continue
            else:  # prose or junk where a key belongs: skip to something that can start a member
                rep.append("skip_garbage")
                skipping, junk_in = True, top
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
    # End of text with containers still open: the output was cut off (or a next turn began).
    if (state == _COLON and not skipping) or (state == _VALUE and in_obj):
        if type(root) is not list or len(stack) == 1:
            raise JSONRepairError(f"key {keys[-1]!r} has no value (output ends after it)")
        # In a top-level array (a list of calls), the last item is dropped, not the whole list.
        root.pop()
        rep.append("drop_truncated_item")
        comma = False
    elif type(root) is list and len(stack) > 1 and not stack[1]:  # cut right after the last item opened
        root.pop()
        rep.append("drop_truncated_item")
        comma = False
    if comma:
        rep.append("drop_trailing_comma")
    rep.append("close_brackets")
    if not root:
        raise NothingFound("nothing recoverable in the output (it ends before the first complete member)")
    return root, stop


def _ellipsis_end(s: str, i: int) -> int:
    """End of the "..." (or "…") at s[i] if it stands for left-out items: a comma, closer or the end
    follows it. Else 0 ("...2" or "... and more" are text)."""
    m = _ELLIPSES.match(s, i)
    if not m:
        return 0
    k = _WS.match(s, m.end()).end()
    return m.end() if k >= len(s) or s[k] in ",]})" else 0


def _at_turn(s: str, i: int) -> bool:
    """Does a line starting at s[i] open the next chat turn ("User: ...")? Models hallucinate one."""
    if not TURN.match(s, i):
        return False
    k = i - 1
    while k >= 0 and s[k] in " \t":
        k -= 1
    return k < 0 or s[k] in "\r\n"


def _plain_string_end(s: str, i: int) -> int:
    """End of the "..." at s[i] if it has no backslash (the common case: no decoding needed), else 0."""
    j = s.find('"', i + 1)
    if j < 0 or s.find("\\", i + 1, j) >= 0:
        return 0
    return j + 1


def _ends_scalar(s: str, j: int) -> bool:
    """Does the number or literal the C scanner read end at j? (Not "12px", not "true story".)"""
    k = _WS.match(s, j).end()
    return k >= len(s) or s[k] in ",}])\"'/#\u201c" or "\n" in s[j:k]


def _pop(stack: list, keys: list, open_count: dict[str, int]) -> None:
    closer = "}" if type(stack.pop()) is dict else keys[-1]
    keys.pop()
    open_count[closer] -= 1
