"""What the keyword modules (_lists, _members, _strings) need of a grammar's rule set: a way to name a
rule. ``_schema.RuleSet`` is the one implementation; this protocol lets the helpers type it without
importing the module that imports them."""

from __future__ import annotations

from typing import Protocol


class Rules(Protocol):
    def rule(self, hint: str, body: str) -> str:
        """Name a rule for ``body`` (reusing an identical one) and return the name."""
        ...
