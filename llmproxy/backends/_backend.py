"""``HTTPBackend``: what every backend that runs as a separate server shares: the constructor
convention, grammar-field handling, the token-count cache, discovery, and a probe that never raises."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import aclosing, contextmanager
from typing import Any, ClassVar

import httpx

from llmproxy.backends._http import (
    AsyncHTTPClient,
    Exchange,
    HTTPClient,
    StreamExchange,
    Timeouts,
    auth_headers,
    normalize_endpoint,
)
from llmproxy.backends._probed_choice import chosen, probe
from llmproxy.backends.base import (
    IDLE,
    AsyncBackend,
    Backend,
    ChatTemplate,
    Completion,
    Embedded,
    EmbeddingInput,
    EmbeddingOptions,
    GenerationParams,
    ProbeResult,
    StreamDelta,
    no_embeddings,
)
from llmproxy.errors import (
    BackendConnectionError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigurationError,
    InvalidRequestError,
    LLMProxyError,
    UnsupportedRequestError,
)
from llmproxy.tokens import PrefixTokenCache

# Used only when the caller sends no max_tokens: every backend gets an explicit limit, because some
# (vLLM, old text-generation-webui) silently stop after 16 tokens otherwise.
FALLBACK_MAX_TOKENS = 1024


def not_up_yet(error: LLMProxyError) -> bool:
    """Whether ``error`` means the server is not (yet) there, so asking again later may work: refused,
    timed out, or 503 (llama.cpp while it loads the model, koboldcpp while busy)."""
    if isinstance(error, BackendHTTPError):
        return error.status == 503
    return isinstance(error, (BackendConnectionError, BackendTimeoutError))


# Inputs sent to a backend in one embedding request: a request of the client's (up to 2048 inputs) goes
# in a few, each within the first-token timeout.
EMBEDDING_BATCH = 256

REDISCOVER_AFTER = 5.0  # seconds the server's requests skip asking a backend that was not up again
# Where the server's discoveries run: one per backend at a time, so a few threads serve every backend.
_DISCOVERY = ThreadPoolExecutor(max_workers=4, thread_name_prefix="llmproxy-discovery")


class HTTPBackend(Backend, AsyncBackend):
    """What every HTTP backend shares. Subclasses set ``name``, ``default_port``, ``capabilities`` and
    ``grammar_key``, and describe their requests, without I/O: ``completion_exchange`` (and
    ``stream_exchange``), ``_probe`` and, with a tokenizer, ``count_exchange``. The library sends them
    with a sync client (``http``), the server with an async one (``ahttp``)."""

    endpoint_suffixes: ClassVar[tuple[str, ...]] = ("/v1",)  # API prefixes users paste into the endpoint
    grammar_key: str | None = None  # request field for a GBNF grammar; None: the backend takes none
    model_hint: ClassVar[str | None] = None  # set where a model name is required: how to find one
    default_settings = {"max_tokens": 1024, "temperature": 0.7, "top_p": 0.95}
    embedding_batch: ClassVar[int] = EMBEDDING_BATCH  # inputs its embedding endpoint takes at once (1: one a request)
    embedding_dimensions_field: ClassVar[bool] = False  # whether that endpoint takes OpenAI's ``dimensions``

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        model: str | None = None,
        auth_type: str | None = None,
        auth_key: str | None = None,
        connect_timeout: float = Timeouts.connect,
        first_token_timeout: float = Timeouts.first_token,
        read_timeout: float = Timeouts.read,
        context_window: int | None = None,
        grammar_field: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        default = self.default_endpoint()
        self.endpoint = normalize_endpoint(endpoint or default, self.name, default, self.endpoint_suffixes)
        if model is None and self.model_hint:
            raise ConfigurationError(f"the {self.name} backend needs a model name (model=...); {self.model_hint}")
        self.model = model
        if grammar_field is not None:
            if not self.capabilities.grammar:
                raise ConfigurationError(f"{self.name} takes no grammar, so grammar_field cannot be set")
            self.grammar_key = grammar_field
        self.configured_context_window = context_window  # sent to servers that take it per request
        self._discovered: ProbeResult | None = None  # the server's first answer, once there is one
        self._discovery_lock = threading.Lock()
        self._pending_discovery: Future[ProbeResult] | None = None  # the server's, off its event loop
        self._last_discovery = -REDISCOVER_AFTER
        self._tokenizer_missing = False
        self._token_counts = PrefixTokenCache()
        self._embedding_length: int | None = None  # learned from the server, or its first embedding
        for setting, seconds in (("connect_timeout", connect_timeout), ("first_token_timeout", first_token_timeout),
                                 ("read_timeout", read_timeout)):
            if not seconds > 0:
                raise ConfigurationError(f"{setting} must be a number of seconds above 0, not {seconds!r}")
        timeouts = Timeouts(connect_timeout, first_token_timeout, read_timeout)
        headers = auth_headers(auth_type, auth_key)
        self.http = HTTPClient(self.name, self.endpoint, default_url=default, headers=headers, timeouts=timeouts,
                               transport=transport)
        self.ahttp = AsyncHTTPClient(self.name, self.endpoint, default_url=default, headers=headers, timeouts=timeouts)

    @classmethod
    def default_endpoint(cls) -> str:
        return f"http://localhost:{cls.default_port}"

    # --- discovery -------------------------------------------------------------------------------

    def discover(self) -> ProbeResult:
        with self._discovery_lock:
            if self._discovered is not None:
                return self._discovered
            try:
                found = self._probe()
            except LLMProxyError as exc:
                found = self._down(exc)
                if not_up_yet(exc):
                    return found  # not kept: the next call asks again
            if found.up:
                self._learn(found)
            # Kept even when it answered but not as hoped (no vLLM version, a model not installed):
            # asking on every request would not change that, and the request itself reports the error.
            self._discovered = found
            return found

    async def _discover_off_loop(self) -> None:
        """``discover`` for the server: one at a time, in a small pool of its own; requests wait for it
        until a first token's time after it began, no longer (a hung server must not hold them for the
        probe's own 10 s), and it is not tried again within REDISCOVER_AFTER seconds of the last try
        (a server that is down: its requests then say why)."""
        if self._discovered is not None:
            return
        pending = self._pending_discovery
        if pending is None or pending.done():
            if time.monotonic() - self._last_discovery < REDISCOVER_AFTER:
                return
            self._last_discovery = time.monotonic()
            pending = self._pending_discovery = _DISCOVERY.submit(self.discover)
        left = self._last_discovery + self.ahttp.timeouts.first_token - time.monotonic()
        if left <= 0:
            return
        try:  # shielded: a request that stops waiting leaves the probe to the others and to its own limit
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), left)
        except TimeoutError:
            pass

    def _learn(self, found: ProbeResult) -> None:
        """Take what the server said as plain values (subclasses add what their requests need)."""

    def context_window(self) -> int | None:
        if self.configured_context_window:
            return self.configured_context_window
        return self._discovered.context_window if self._discovered else None

    def chat_template(self) -> ChatTemplate | None:
        return self._discovered.chat_template if self._discovered else None

    def probe(self) -> ProbeResult:
        try:
            return self._probe()
        except LLMProxyError as exc:
            return self._down(exc)

    def _down(self, error: LLMProxyError) -> ProbeResult:
        return ProbeResult(backend=self.name, url=self.endpoint, up=False, model=self.model, detail=str(error))

    def _probe(self) -> ProbeResult:
        """Ask the server what it serves (raises llmproxy errors); the one place each backend does so."""
        raise NotImplementedError

    # --- requests --------------------------------------------------------------------------------

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        """The request for the whole answer to ``prompt``; no I/O."""
        raise NotImplementedError

    def stream_exchange(self, prompt: str, params: GenerationParams) -> StreamExchange | None:
        """The request for a streamed answer; None for a server that cannot stream (it then answers
        in one piece)."""
        return None

    def count_exchange(self, text: str) -> Exchange[int]:
        """The request that counts ``text``'s tokens (backends whose capabilities say tokenizer)."""
        raise NotImplementedError

    def embedding_exchange(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Exchange[Embedded]:
        """The request that embeds ``inputs`` (at most ``embedding_batch`` of them; capabilities say
        embeddings); no I/O."""
        raise no_embeddings(self.name)

    def embedding_fallback(self, error: BackendHTTPError) -> bool:
        """Whether an embedding request that failed with ``error`` is asked again another way (a server
        older than the endpoint asked: llama.cpp's /embedding); False by default."""
        return False

    def _embedding_exchanges(self, inputs: Sequence[EmbeddingInput],
                             options: EmbeddingOptions) -> list[Exchange[Embedded]]:
        if not self.capabilities.embedding_tokens and not all(isinstance(item, str) for item in inputs):
            raise UnsupportedRequestError(f"the {self.name} backend embeds text only; send strings, not token ids",
                                          param="input")
        step = self.embedding_batch
        return [self.embedding_exchange(inputs[start:start + step], options) for start in range(0, len(inputs), step)]

    def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Embedded:
        self.discover()
        while True:
            exchanges = self._embedding_exchanges(inputs, options)
            try:
                return self._joined(len(inputs), options, [self.http.post(exchange) for exchange in exchanges])
            except BackendHTTPError as exc:
                if not self.embedding_fallback(exc):
                    raise refused_input(exc) from exc

    async def aembed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Embedded:
        await self._discover_off_loop()
        while True:
            exchanges = self._embedding_exchanges(inputs, options)
            try:
                return self._joined(len(inputs), options,
                                    [await self.ahttp.answer(exchange) for exchange in exchanges])
            except BackendHTTPError as exc:
                if not self.embedding_fallback(exc):
                    raise refused_input(exc) from exc

    def _joined(self, expected: int, options: EmbeddingOptions, parts: list[Embedded]) -> Embedded:
        """The answers to one request's batches as one, checked to hold a vector per input; the model's own
        length learned from an answer of full vectors."""
        vectors = [vector for part in parts for vector in part.vectors]
        if len(vectors) != expected or any(not vector for vector in vectors):
            raise BackendProtocolError(
                f"{self.name} at {self.endpoint} answered {len(vectors)} embeddings (empty ones included) for"
                f" {expected} inputs; is its embedding model loaded, and every input within its context?",
                backend=self.name, url=self.endpoint)
        if options.dimensions is None:
            self._embedding_length = len(vectors[0])
        counts = [part.prompt_tokens for part in parts if part.prompt_tokens is not None]
        return Embedded(vectors, sum(counts) if len(counts) == len(parts) else None)

    def embedding_dimensions(self) -> int | None:
        return self._embedding_length

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        self.discover()  # a no-op once the server has answered; asks again if it was not up at start
        params = self._choose(prompt, params)
        return self.http.post(self.completion_exchange(prompt, params))

    def _choose(self, prompt: str, params: GenerationParams) -> GenerationParams:
        """``params`` with a choice between calling and answering made (llmproxy.backends._probed_choice)."""
        if params.choice_grammar is None:
            return params
        return chosen(params, self.http.post(self.completion_exchange(prompt, probe(params))))

    async def _achoose(self, prompt: str, params: GenerationParams) -> GenerationParams:
        if params.choice_grammar is None:
            return params
        return chosen(params, await self.ahttp.answer(self.completion_exchange(prompt, probe(params))))

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        self.discover()
        params = self._choose(prompt, params)
        exchange = self.stream_exchange(prompt, params)
        if exchange is None:
            return iter([whole(self.http.post(self.completion_exchange(prompt, params)))])
        return self.http.stream(exchange)

    async def acomplete(self, prompt: str, params: GenerationParams) -> Completion:
        await self._discover_off_loop()
        params = await self._achoose(prompt, params)
        return await self.ahttp.answer(self.completion_exchange(prompt, params))

    async def astream(self, prompt: str, params: GenerationParams, *,
                      idle_after: float | None = None) -> AsyncIterator[StreamDelta]:
        await self._discover_off_loop()
        params = await self._achoose(prompt, params)
        exchange = self.stream_exchange(prompt, params)
        if exchange is None:  # a server that cannot stream: its whole answer is the one delta
            answering = asyncio.ensure_future(self.ahttp.answer(self.completion_exchange(prompt, params)))
            try:
                while not (await asyncio.wait({answering}, timeout=idle_after))[0]:
                    yield IDLE
                yield whole(answering.result())
            finally:
                answering.cancel()  # closed before the answer came: it is not waited for
            return
        async with aclosing(self.ahttp.stream(exchange, idle_after=idle_after)) as deltas:  # closed when this is
            each = None  # what the reader sends in, passed on: a relay's callback (llmproxy.server.lanes)
            while True:
                try:
                    delta = await deltas.asend(each)
                except StopAsyncIteration:
                    return
                each = yield delta

    def grammar_fields(self, params: GenerationParams) -> dict[str, Any]:
        """The request field(s) carrying ``params.grammar``; a grammar is never silently dropped."""
        if params.grammar is None:
            return {}
        if self.grammar_key is None:
            from llmproxy.backends import backends_with  # the registry imports this module

            raise UnsupportedRequestError(
                f"the {self.name} backend cannot constrain output with a grammar; turn grammar off for this"
                f" wrapper or use a backend that takes one ({', '.join(backends_with('grammar'))})",
                param="grammar",
            )
        return {self.grammar_key: params.grammar}

    def count_tokens(self, text: str) -> int | None:
        """Tokens by the server's own tokenizer; None when it has none (the caller then estimates)."""
        if not self.capabilities.tokenizer or self._tokenizer_missing:
            return None
        self.discover()  # vLLM's /tokenize wants the served model's name
        with self._tokenizer_check():
            return self._token_counts.count(text, lambda rest: self.http.post(self.count_exchange(rest)))
        return None

    async def acount_tokens(self, text: str) -> int | None:
        if not self.capabilities.tokenizer or self._tokenizer_missing:
            return None
        await self._discover_off_loop()
        with self._tokenizer_check():
            known, rest = self._token_counts.known(text)
            if rest is None:
                return known
            total = known + await self.ahttp.answer(self.count_exchange(rest))
            self._token_counts.put(text, total)
            return total
        return None

    @contextmanager
    def _tokenizer_check(self) -> Iterator[None]:
        """Learn from a 404 that the server has no tokenizer (e.g. an OpenAI-compatible server
        without /tokenize): the error is swallowed and the caller estimates from then on."""
        try:
            yield
        except BackendHTTPError as exc:
            if exc.status != 404:
                raise
            self._tokenizer_missing = True

    def close(self) -> None:
        self.http.close()

    async def aclose(self) -> None:
        await self.ahttp.aclose()


def refused_input(error: BackendHTTPError) -> LLMProxyError:
    """A backend's 400 or 422 to an embedding request is about the client's input (an input too long, a
    ``dimensions`` the model cannot give): the client's error, with the backend's words; any other status
    stays the backend's."""
    if error.status in (400, 422):
        return InvalidRequestError(error.message, param="input")
    return error


def whole(done: Completion) -> StreamDelta:
    """A whole answer as the one delta of a stream."""
    return StreamDelta(done.text, done.finish_reason, done.prompt_tokens, done.completion_tokens, done.stop_word)


def max_tokens(params: GenerationParams) -> int:
    return FALLBACK_MAX_TOKENS if params.max_tokens is None else params.max_tokens


def sampler_fields(params: GenerationParams, names: Mapping[str, str]) -> dict[str, Any]:
    """``temperature``/``top_p``/``seed`` and the samplers set, under the backend's ``names`` (its
    ``samplers``), leaving out those not set."""
    values = {"temperature": params.temperature, "top_p": params.top_p, "seed": params.seed, **params.samplers}
    return {names.get(key, key): value for key, value in values.items() if value is not None}
