"""The members of an object with declared properties: schema order, ``required`` ones always there,
the others omissible, and ``minProperties``/``maxProperties`` counted where they can vary.

The difficulty is the comma: it goes before every member but the first one written, so what may come
next depends on what was written before. Spelling out every choice of first member with its own tail
is quadratic in the number of properties; a rule per property that either writes it or skips to the
next one is linear, but chains the rules (each starts with the next), and the grammar checks refuse
chains longer than a few hundred (llmproxy.grammar.limits) since llama.cpp follows them recursively.

So a run of optional properties is a tree of fan-out FAN_OUT (``_OptionalRun``): for each property, a
``-then`` rule says what may follow it inside the run (nothing, or a comma and any later property), and
"any property after this subtree" is one ``-after`` rule per subtree, which chains only among siblings. The
grammar stays linear in the properties (about two rules each), chains at most FAN_OUT rules per level
of the tree, and the comma is written once before the choice of the next key (one parse stack per
key, not three). Runs of required properties in between are plain text.

Counts (min/maxProperties) need a state per number of members written; they are kept for objects with
at most MAX_COUNTED_STEPS runs and MAX_COUNTED_STATES states (``_CountedChain``), otherwise dropped:
the grammar admits a superset and the validation after generation checks the count.
"""

from __future__ import annotations

from llmproxy.errors import GrammarError
from llmproxy.grammar._rules import Rules


FAN_OUT = 16
MAX_COUNTED_STEPS = 64
MAX_COUNTED_STATES = 1024
_COMMA = '"," ws'  # each member brings the whitespace after it (members)

Step = tuple[list[str], bool]  # key-value expressions, and whether they are a run of required ones


def members(
    rules: Rules,
    hint: str,
    items: list[tuple[str, bool]],
    *,
    after_first: bool,
    low: int = 0,
    high: int | None = None,
) -> str:
    """GBNF for ``items`` (``key: value`` expression, required?) as object members; "" for none.

    ``after_first``: a member was already written (every item then takes a comma). ``low``/``high``:
    bounds on the number of these members present (``high`` None: none). Each member is followed by its
    whitespace, as the elements of a list are (llmproxy.grammar._lists.list_body says why): the braces
    enclose the body as ``"{" ws body "}"``.
    """
    items = [(f"{kv} ws", required) for kv, required in items]
    steps = _steps(items)
    optional = sum(len(kvs) for kvs, required in steps if not required)
    required = len(items) - optional
    if high is not None and high < required:
        raise GrammarError(f"maxProperties at {hint!r} is below the number of required properties")
    # Count the optional members only; what the declared properties cannot give is left to the validation.
    low = min(max(low - required, 0), optional)
    high = None if high is None or high - required >= optional else high - required
    if low or high is not None:
        counted: list[Step] = []  # one optional member per step; a required run is one text
        for kvs, req in steps:
            counted += [([f" {_COMMA} ".join(kvs)], True)] if req else [([kv], False) for kv in kvs]
        cap = high if high is not None else low
        if len(counted) <= MAX_COUNTED_STEPS and (len(counted) + 1) * (cap + 1) * 2 <= MAX_COUNTED_STATES:
            return _CountedChain(rules, hint, counted, low, high, cap).build(after_first)
    return _Plain(rules, hint, steps).build(after_first)


def _steps(items: list[tuple[str, bool]]) -> list[Step]:
    """Items grouped into runs: optional ones together, required ones together."""
    steps: list[Step] = []
    for kv, required in items:
        if steps and steps[-1][1] == required:
            steps[-1][0].append(kv)
        else:
            steps.append(([kv], required))
    return steps


# --- without counts --------------------------------------------------------------------------


class _Plain:
    def __init__(self, rules: Rules, hint: str, steps: list[Step]) -> None:
        self.rules, self.hint, self.steps = rules, hint, steps

    def build(self, after_first: bool) -> str:
        if after_first:
            return self.led(self.steps)
        if self.steps[0][1]:
            return self.opened(self.steps)
        run = _OptionalRun(self.rules, self.hint).any(self.steps[0][0])
        if len(self.steps) == 1:
            return f'( {run} | "" )'
        # A required run follows: with a comma after any optional member written before it.
        fixed = self.rules.rule(f"{self.hint}-fixed", self.opened(self.steps[1:]))
        return f"( {run} {_COMMA} {fixed} | {fixed} )"

    def opened(self, steps: list[Step]) -> str:
        """The steps when nothing was written yet and the first is a required run (which opens them)."""
        return " ".join(filter(None, [f" {_COMMA} ".join(steps[0][0]), self.led(steps[1:])]))

    def led(self, steps: list[Step]) -> str:
        """The steps after something was written: every member takes a comma."""
        parts = []
        for kvs, required in steps:
            if required:
                parts.append(" ".join(f"{_COMMA} {kv}" for kv in kvs))
            else:
                run = _OptionalRun(self.rules, self.hint).any(kvs)
                parts.append(self.rules.rule(f"{self.hint}-some", f'{_COMMA} {run} | ""'))
        return " ".join(parts)


class _OptionalRun:
    """A non-empty ordered choice from a run of optional members, commas between, as a tree."""

    def __init__(self, rules: Rules, hint: str) -> None:
        self.rules, self.hint = rules, hint

    def any(self, kvs: list[str]) -> str:
        """An expression: one member of ``kvs`` and then any later ones."""
        tree: list = list(kvs)
        while len(tree) > FAN_OUT:  # group into subtrees of FAN_OUT, bottom up
            tree = [tree[i:i + FAN_OUT] for i in range(0, len(tree), FAN_OUT)]
        return self._node(tree, None)

    def _node(self, node: list | str, after: str | None) -> str:
        """Any member of ``node`` with what may follow it; ``after``: any member after the node (post-comma)
        or None. Children are built from the last, so each knows what follows it."""
        if isinstance(node, str):  # one member: it, then optionally a comma and a later one
            if after is None:
                return node
            then = self.rules.rule(f"{self.hint}-then", f'{_COMMA} {after} | ""')
            return f"{node} {then}"
        choices = []
        for child in reversed(node):
            choice = self._node(child, after)
            choices.append(choice)
            after = choice if after is None else self.rules.rule(f"{self.hint}-after", f"{choice} | {after}")
        body = " | ".join(reversed(choices))
        return self.rules.rule(f"{self.hint}-any", body) if len(choices) > 1 else body


# --- with counts -----------------------------------------------------------------------------


class _CountedChain:
    """States ``(step, counted, started)``, a rule each, built from the last step back; for small objects."""

    def __init__(self, rules: Rules, hint: str, steps: list[Step], low: int, high: int | None, cap: int) -> None:
        self.rules, self.hint, self.steps = rules, hint, steps
        self.low, self.high, self.cap = low, high, cap
        self.optional_after = [0] * (len(steps) + 1)  # optional steps from each step on
        for i in range(len(steps) - 1, -1, -1):
            self.optional_after[i] = self.optional_after[i + 1] + (not steps[i][1])

    def moves(self, i: int, count: int, started: bool) -> list[tuple[str, tuple[int, int, bool]]]:
        """From state (i, count, started): (text written, next state) for each way on."""
        (kv,), required = self.steps[i]
        text = f"{_COMMA} {kv}" if started else kv
        if required:
            return [(text, (i + 1, count, True))]
        out = []
        if self.high is None or count < self.high:
            out.append((text, (i + 1, min(count + 1, self.cap), True)))
        if count + self.optional_after[i + 1] >= self.low:  # enough optional steps left to skip this one
            out.append(("", (i + 1, count, started)))
        return out

    def build(self, after_first: bool) -> str:
        start = (0, 0, after_first)
        reachable: list[set] = [set() for _ in range(len(self.steps) + 1)]
        reachable[0].add(start)
        for i in range(len(self.steps)):
            for state in reachable[i]:
                reachable[i + 1].update(following for _, following in self.moves(*state))
        exprs: dict[tuple[int, int, bool], str] = {state: "" for state in reachable[-1]}
        for i in range(len(self.steps) - 1, -1, -1):
            for state in sorted(reachable[i]):
                moves = self.moves(*state)
                alternatives = [" ".join(filter(None, (text, exprs[following]))) for text, following in moves]
                exprs[state] = self.name(alternatives, top=state == start)
        return exprs[start]

    def name(self, alternatives: list[str], top: bool) -> str:
        """An expression for the alternatives: a rule, except where one plain reference or nothing does,
        or at the top (the caller writes it into the object rule)."""
        if len(alternatives) == 1 and (top or " " not in alternatives[0]):
            return alternatives[0]
        body = " | ".join(a or '""' for a in alternatives)  # a bare trailing '|' would swallow the newline
        return f"( {body} )" if top else self.rules.rule(f"{self.hint}-count", body)
