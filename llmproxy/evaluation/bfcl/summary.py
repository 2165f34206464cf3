"""Results counted per category, target and face: right answers, each kind of failure, time a case."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

from llmproxy.evaluation.bfcl.data import CATEGORIES
from llmproxy.evaluation.bfcl.runner import CaseResult


@dataclass
class Tally:
    category: str
    target: str
    face: str
    total: int = 0
    correct: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def share(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def mean_seconds(self) -> float:
        return self.seconds / self.total if self.total else 0.0


def tally(results: Iterable[CaseResult]) -> list[Tally]:
    """One tally per (category, target, face), in BFCL's category order, then in the order results came."""
    tallies: dict[tuple[str, str, str], Tally] = {}
    for result in results:
        key = (result.category, result.target, result.face)
        counted = tallies.setdefault(key, Tally(*key))
        counted.total += 1
        counted.correct += result.correct
        counted.seconds += result.seconds
        if result.kind:
            counted.kinds[result.kind] += 1
    order = {name: index for index, name in enumerate(CATEGORIES)}
    return sorted(tallies.values(), key=lambda t: order.get(t.category, len(order)))


def write_jsonl(results: Iterable[CaseResult], stream: IO[str]) -> None:
    """One JSON object a case: every field of its CaseResult."""
    for result in results:
        stream.write(json.dumps(dataclasses.asdict(result), ensure_ascii=False) + "\n")
