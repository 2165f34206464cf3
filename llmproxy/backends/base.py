"""The backend seam: what every backend module implements.

A backend turns a raw prompt into raw text. It knows nothing about chat messages, wrappers or
function calls; it only translates the common generation parameters into its own wire vocabulary.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class GenerationParams:
    """Common generation parameters, in llmproxy's vocabulary (OpenAI's names).

    ``extra`` holds backend-specific keys from the settings layers; backends pass them through
    unchanged, so a user can set e.g. ``mirostat`` for llama.cpp without llmproxy knowing it.
    """

    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None  # for backends that constrain by JSON schema (Ollama's format)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    """A finished generation. Token counts are None when the backend did not report them."""

    text: str
    finish_reason: FinishReason = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class StreamDelta:
    """One piece of a streamed generation; the last one carries ``finish_reason`` (and counts if known)."""

    text: str
    finish_reason: FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the pipeline reads this instead of checking backend names."""

    grammar: bool = False  # accepts a GBNF grammar
    streaming: bool = True
    tokenizer: bool = False  # count_tokens() uses the model's own tokenizer
    json_schema: bool = False  # accepts a JSON schema as a constraint (Ollama's ``format``)
    concurrent: bool = True  # serves several generations at once (False: one at a time, callers queue)


@dataclass(frozen=True)
class ProbeResult:
    """What a backend says about itself: is it up, which model, how large a context, grammar?"""

    backend: str
    url: str | None
    up: bool
    model: str | None = None
    context_window: int | None = None
    grammar: bool | None = None
    detail: str = ""


class Backend(abc.ABC):
    """Base class for backends. Subclasses set ``name`` and ``capabilities`` and implement ``complete``."""

    name: str = "backend"
    capabilities: Capabilities = Capabilities()

    @abc.abstractmethod
    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        """Generate a completion for ``prompt``."""

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        """Stream a completion; backends that cannot stream yield the whole answer as one delta."""
        done = self.complete(prompt, params)
        yield StreamDelta(done.text, done.finish_reason, done.prompt_tokens, done.completion_tokens)

    def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text`` by the model's own tokenizer, or None when the backend has none."""
        return None

    def context_window(self) -> int | None:
        """The context size the backend serves, when it can tell; None when unknown."""
        return None

    def probe(self) -> ProbeResult:
        """Ask the backend whether it is up and what it serves."""
        return ProbeResult(backend=self.name, url=None, up=True)

    def close(self) -> None:
        """Release connections or other resources."""
