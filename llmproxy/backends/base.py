"""The backend seam: what every backend module implements.

A backend turns a raw prompt into raw text. It knows nothing about chat messages, wrappers or
function calls; it only translates the common generation parameters into its own wire vocabulary.

Everything about a backend type lives on its class: its registry ``name``, the server's
``default_port``, its ``capabilities`` and its ``default_settings``. What only the running server can
tell (the model it serves, its context window, its chat template, vLLM's grammar field) is learned by
``discover()``, once, off the event loop; after that every answer is a plain value.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from llmproxy.errors import UnsupportedRequestError

if TYPE_CHECKING:
    from llmproxy.syntaxes.base import GrammarChoice, LazyGrammar

FinishReason = Literal["stop", "length"]

# Sampler settings most local backends take under one name or another, in llmproxy's names (llama.cpp's).
# Each backend class says which it takes and under what name (``Backend.samplers``); settings presets
# are written in these names, so one preset means the same on every backend.
SAMPLERS = ("top_k", "min_p", "typical_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
            "mirostat", "mirostat_tau", "mirostat_eta")
# A call chosen under ``choose`` (llmproxy.decide) is drawn with these, whatever the settings: its values
# copy what the request has just written, and repeat one another, where a penalty on repeats turns them
# into others. With the embedded backend's default repeat penalty (1.1), SmolLM2's logits (40 and more)
# lost 4 nats for a digit just written: "rate": 5, not 0.05, after "principle": 1000 for "annual rate of 5%".
CALL_PENALTIES = MappingProxyType({"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0})


def sampler_names(*same: str, **renamed: str) -> Mapping[str, str]:
    """A backend's ``samplers``: those it takes under llmproxy's name, and those it names otherwise."""
    return MappingProxyType({**{name: name for name in same}, **renamed})


@dataclass(frozen=True)
class GenerationParams:
    """Common generation parameters, in llmproxy's vocabulary (OpenAI's names).

    ``samplers`` holds the SAMPLERS that are set, under llmproxy's names; each backend translates them.
    ``extra`` holds backend-specific keys from the settings layers; backends pass them through
    unchanged, so a user can set e.g. ``dry_multiplier`` for llama.cpp without llmproxy knowing it.
    """

    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    grammar: str | None = None
    # The same constraint for a server that applies it lazily (llama.cpp's ``grammar_lazy``): a grammar
    # from a trigger word on; backends without lazy grammars use ``grammar``, which admits the same answers.
    lazy_grammar: LazyGrammar | None = None
    # The same constraint for a backend that makes the first step a choice between calling and answering
    # from the model's probabilities (``tool_choice: auto`` decided as ``choose``); others use ``grammar``.
    choice_grammar: GrammarChoice | None = None
    json_schema: dict[str, Any] | None = None  # for backends that constrain by JSON schema (Ollama's format)
    logprobs: int | None = None  # report token log probabilities, with this many top alternatives each
    extra: dict[str, Any] = field(default_factory=dict)
    samplers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log probability, and the most likely tokens at its place."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Completion:
    """A finished generation. Token counts are None when the backend did not report them; ``logprobs``
    when they were not asked for. ``stop_word`` is the stop string that ended it, where the backend
    says which (None when it ended otherwise, or the backend does not tell)."""

    text: str
    finish_reason: FinishReason = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    stop_word: str | None = None


@dataclass(slots=True)
class StreamDelta:
    """One piece of a streamed generation; the last one carries ``finish_reason`` (and counts, and the
    stop string that ended it, if known). Slotted and not frozen: one is made for every token a server
    relays, and its fields are read several times each (a named tuple's fields read at twice the cost,
    a frozen dataclass is made at four times)."""

    text: str
    finish_reason: FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    stop_word: str | None = None


# The delta of a stream opened with ``idle_after`` (``AsyncBackend.astream``) that says only that
# nothing came in that time: the backend still reads the prompt. Told apart by identity; it is empty,
# so a reader that adds it to the answer anyway adds nothing.
IDLE = StreamDelta("")

# What a stream's deltas are handed to once a reader relays them as they come (``AsyncBackend.astream``'s
# streams take one sent in): an awaitable where the reader must be waited for before the next delta.
Relayed = Callable[[StreamDelta], Awaitable[None] | None]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the pipeline reads this instead of checking backend names."""

    grammar: bool = False  # accepts a GBNF grammar
    lazy_grammar: bool = False  # applies one from a trigger word on (llama.cpp's grammar_lazy)
    choice_grammar: bool = False  # chooses between calling and answering from the model's probabilities
    follows_call_lists: bool = False  # under choose, decides after each call whether another follows
    streaming: bool = True
    tokenizer: bool = False  # count_tokens() uses the model's own tokenizer
    json_schema: bool = False  # accepts a JSON schema as a constraint (Ollama's ``format``)
    concurrent: bool = True  # serves several generations at once (False: one at a time, callers queue)
    logprobs: bool = False  # reports each generated token's log probability (and the top alternatives)
    embeddings: bool = False  # has an embedding endpoint (``Backend.embed``)
    embedding_tokens: bool = False  # embeds token ids as well as text


# One input to embed: a text, or the token ids of one (OpenAI's ``input`` takes both).
EmbeddingInput = str | tuple[int, ...]


@dataclass(frozen=True)
class EmbeddingOptions:
    """What an embedding request asks besides its inputs: ``dimensions`` passed to servers whose protocol
    shortens vectors (vLLM, Ollama); the answer is checked against it either way."""

    dimensions: int | None = None


@dataclass(frozen=True)
class Embedded:
    """A backend's embeddings, one vector per input in order; ``prompt_tokens`` None where it reports none."""

    vectors: list[list[float]]
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class ChatTemplate:
    """The model's own chat template (Hugging Face Jinja) and the BOS/EOS texts it refers to."""

    text: str
    bos_token: str | None
    eos_token: str | None
    source: str  # where it was read, for messages: "the GGUF metadata of x.gguf", "GET /props of ..."
    tool_use_text: str | None = None  # a separate template for requests with tools, where the model has one


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
    grammar_field: str | None = None  # the request field that carries a grammar, where known
    chat_template: ChatTemplate | None = None


class Backend(abc.ABC):
    """Base class for backends. Subclasses set the class attributes and implement ``complete``."""

    name: ClassVar[str] = "backend"  # the registry name (MemGPT's endpoint type)
    default_port: ClassVar[int | None] = None  # where the server usually listens; None: in-process
    # What this backend type can do. An instance may narrow it until discovery tells (vLLM's grammar).
    capabilities: Capabilities = Capabilities()
    # The first settings layer (then the user file, then the call); never stop strings: those are the wrapper's.
    default_settings: ClassVar[Mapping[str, Any]] = {}
    # The SAMPLERS it takes, each under the name its requests give it (and temperature, top_p and seed
    # where it names them otherwise). A sampler missing here has no counterpart on this backend: the
    # settings layers leave it out, with a warning (llmproxy.settings).
    samplers: ClassVar[Mapping[str, str]] = sampler_names()

    @abc.abstractmethod
    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        """Generate a completion for ``prompt``."""

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        """Stream a completion; backends that cannot stream yield the whole answer as one delta."""
        done = self.complete(prompt, params)
        yield StreamDelta(done.text, done.finish_reason, done.prompt_tokens, done.completion_tokens, done.stop_word)

    def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text`` by the model's own tokenizer, or None when the backend has none."""
        return None

    def discover(self) -> ProbeResult:
        """Learn what only the server can tell, once; blocking, so call it off the event loop.

        The first answer is kept and later calls return it; a server that is not up yet is asked again
        on the next call (``complete``/``stream`` make that call themselves). Never raises for a server
        that is down; an embedded GGUF file that cannot be read is a configuration error.
        """
        return self.probe()

    def context_window(self) -> int | None:
        """The configured context size, else the discovered one; None when unknown. No I/O."""
        return None

    def chat_template(self) -> ChatTemplate | None:
        """The model's own chat template as discovered; None where the backend exposes none or discovery
        has not reached the server yet. Never asks a server (the embedded backend reads its GGUF's header
        once)."""
        return None

    def probe(self) -> ProbeResult:
        """Ask the backend now whether it is up and what it serves; never raises for a server that is down."""
        return ProbeResult(backend=self.name, url=None, up=True)

    def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Embedded:
        """One vector per input, by the backend's embedding model (``capabilities.embeddings``)."""
        raise no_embeddings(self.name)

    def embedding_dimensions(self) -> int | None:
        """The length of this backend's embeddings, where known (read from the model, or from an answer)."""
        return None

    def close(self) -> None:
        """Release connections or other resources."""


class AsyncBackend(abc.ABC):
    """A backend whose I/O can also run on an event loop: the server then calls it there, so a slow or
    hung backend holds no worker thread, only its own requests. The embedded model computes, so it
    has no such side: the server runs it in worker threads."""

    @abc.abstractmethod
    async def acomplete(self, prompt: str, params: GenerationParams) -> Completion:
        """``Backend.complete``, awaited (for what only a whole answer reports: logprobs)."""

    @abc.abstractmethod
    def astream(self, prompt: str, params: GenerationParams, *,
                idle_after: float | None = None) -> AsyncIterator[StreamDelta]:
        """``Backend.stream``, as an async iterator; closing it early stops the generation. With
        ``idle_after``, until the first token, ``IDLE`` after every ``idle_after`` seconds in which nothing
        came (for a server whose own client gives up on a silent connection). A stream that can relay
        takes a ``Relayed`` sent in (``asend``) after a delta: it hands it every later delta as the bytes
        arrive, then gives the closing one; any other ignores it and goes on as a read would."""

    @abc.abstractmethod
    async def acount_tokens(self, text: str) -> int | None:
        """``Backend.count_tokens``, awaited."""

    async def aembed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Embedded:
        """``Backend.embed``, awaited."""
        raise no_embeddings(getattr(self, "name", "this"))


def no_embeddings(backend: str) -> UnsupportedRequestError:
    from llmproxy.backends import backends_with  # the registry imports this module

    return UnsupportedRequestError(
        f"the {backend} backend has no embedding endpoint; serve embeddings from a model on one that has"
        f" ({', '.join(backends_with('embeddings'))})", param="model")

    async def aclose(self) -> None:
        """Release what the event loop holds (connections)."""
