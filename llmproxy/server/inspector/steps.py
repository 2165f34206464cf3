"""The bodies of one request's steps, kept only when the server captures (``--capture``).

They hold user data (the client's messages, the prompt, the model's output), so nothing here exists
unless the operator asked for it: without capture a request's ``RequestLog.steps`` is None and the
inspector shows its metadata alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llmproxy.backends.base import GenerationParams

CUT = "\n… (cut: {} more characters)"


def size(text: str | None) -> int:
    """An upper bound on the bytes ``text`` holds (a non-ASCII character takes up to 4 in a str)."""
    if not text:
        return 0
    return len(text) if text.isascii() else 4 * len(text)


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, saying how much was left out."""
    return text if len(text) <= limit else text[:limit] + CUT.format(len(text) - limit)


@dataclass
class Attempt:
    """One generation: what was sent, what came back, and why it was not used (if it was not)."""

    prompt: str
    stops: tuple[str, ...]
    grammar: str | None  # the GBNF sent
    lazy_grammar: str | None = None  # the same, applied from a trigger word on, for backends that take it
    triggers: tuple[str, ...] = ()
    json_schema: str | None = None  # a backend constrained by a JSON schema instead
    raw: str | None = None  # the backend's raw output
    rejected: str | None = None  # the checker's message, given to the model on its second chance


@dataclass
class Steps:
    """Every step of one request, each text cut at ``limit`` characters."""

    limit: int
    request: str | None = None  # the client's body, as JSON
    kind: Any = None  # its endpoint's Generation class (llmproxy.server.endpoints), to run it again
    whole: bool = False  # the request is kept whole (not cut), so it can be run again
    markers: tuple[str, ...] = ()  # the wrapper's reserved markers and stops, shown in the prompt
    attempts: list[Attempt] = field(default_factory=list)
    response: str | None = None  # the body sent (streams: the pipeline's final response)
    failure: str | None = None  # the error message sent instead
    rerun_of: int | None = None  # the inspector entry this request ran again
    changes: dict[str, Any] | None = None  # what that run changed

    def received(self, kind: Any, fields: dict[str, Any]) -> None:
        text = json.dumps(fields, ensure_ascii=False, indent=2)
        self.kind, self.request, self.whole = kind, cut(text, self.limit), len(text) <= self.limit

    def planned(self, prompt: str, params: GenerationParams, markers: tuple[str, ...]) -> None:
        lazy = params.lazy_grammar
        schema = json.dumps(params.json_schema, indent=2) if params.json_schema is not None else None
        self.markers = markers
        self.attempts.append(Attempt(cut(prompt, self.limit), params.stop, self._cut(params.grammar),
                                     self._cut(lazy.text) if lazy else None, lazy.triggers if lazy else (), schema))

    def _cut(self, text: str | None) -> str | None:
        return cut(text, self.limit) if text else None

    def output(self, text: str) -> None:
        if self.attempts:
            self.attempts[-1].raw = cut(text, self.limit)

    def rejected(self, reason: str) -> None:
        if self.attempts:
            self.attempts[-1].rejected = cut(reason, self.limit)

    def responded(self, body: str) -> None:
        self.response = cut(body, self.limit)

    def bytes(self) -> int:
        texts = [self.request, self.response, self.failure]
        for attempt in self.attempts:
            texts += [attempt.prompt, attempt.grammar, attempt.lazy_grammar, attempt.json_schema, attempt.raw,
                      attempt.rejected]
        return sum(size(text) for text in texts)

    def view(self) -> dict[str, Any]:
        return {"request": self.request, "markers": list(self.markers), "response": self.response,
                "failure": self.failure,
                "attempts": [{"prompt": a.prompt, "stops": list(a.stops), "grammar": a.grammar,
                              "lazy_grammar": a.lazy_grammar, "triggers": list(a.triggers),
                              "json_schema": a.json_schema, "raw": a.raw, "rejected": a.rejected}
                             for a in self.attempts]}
