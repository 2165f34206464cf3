"""``HTTPBackend``: what every backend that runs as a separate server shares: the constructor
convention, grammar-field handling, the token-count cache, and a probe that never raises."""

from __future__ import annotations

from typing import Any

import httpx

from llmproxy.backends._http import HTTPClient, auth_headers, default_endpoint, normalize_endpoint
from llmproxy.backends.base import Backend, GenerationParams, ProbeResult
from llmproxy.errors import BackendHTTPError, ConfigurationError, LLMProxyError, UnsupportedRequestError
from llmproxy.tokens import PrefixTokenCache

# Used only when the caller sends no max_tokens: every backend gets an explicit limit, because some
# (vLLM, old text-generation-webui) silently stop after 16 tokens otherwise.
FALLBACK_MAX_TOKENS = 1024


class HTTPBackend(Backend):
    """What every HTTP backend shares. Subclasses set ``name``, ``capabilities`` and ``grammar_key``
    and implement ``complete`` (and ``stream``), ``_probe`` and, with a tokenizer, ``_count_tokens``."""

    endpoint_suffixes: tuple[str, ...] = ("/v1",)  # API prefixes users paste into the endpoint
    grammar_key: str | None = None  # request field for a GBNF grammar; None: the backend takes none
    model_hint: str | None = None  # set where a model name is required: how to find one

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        model: str | None = None,
        auth_type: str | None = None,
        auth_key: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 600.0,
        context_window: int | None = None,
        grammar_field: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = normalize_endpoint(endpoint or default_endpoint(self.name), self.name, self.endpoint_suffixes)
        if model is None and self.model_hint:
            raise ConfigurationError(f"the {self.name} backend needs a model name (model=...); {self.model_hint}")
        self.model = model
        if grammar_field is not None:
            if not self.capabilities.grammar:
                raise ConfigurationError(f"{self.name} takes no grammar, so grammar_field cannot be set")
            self.grammar_key = grammar_field
        self.configured_context_window = context_window  # sent to servers that take it per request
        self._context_window = context_window
        self._context_asked = context_window is not None
        self._tokenizer_missing = False
        self._token_counts = PrefixTokenCache()
        self.http = HTTPClient(
            self.name,
            self.endpoint,
            headers=auth_headers(auth_type, auth_key),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            transport=transport,
        )

    def grammar_fields(self, params: GenerationParams) -> dict[str, Any]:
        """The request field(s) carrying ``params.grammar``; a grammar is never silently dropped."""
        if params.grammar is None:
            return {}
        if self.grammar_key is None:
            raise UnsupportedRequestError(
                f"the {self.name} backend cannot constrain output with a grammar; turn grammar off for this"
                " wrapper or use a backend that takes one (llamacpp, koboldcpp, webui, vllm)",
                param="grammar",
            )
        return {self.grammar_key: params.grammar}

    def count_tokens(self, text: str) -> int | None:
        """Tokens by the server's own tokenizer; None when it has none (the caller then estimates)."""
        if not self.capabilities.tokenizer or self._tokenizer_missing:
            return None
        try:
            return self._token_counts.count(text, self._count_tokens)
        except BackendHTTPError as exc:
            if exc.status != 404:
                raise
            self._tokenizer_missing = True  # e.g. an OpenAI-compatible server without /tokenize
            return None

    def _count_tokens(self, text: str) -> int:
        raise NotImplementedError

    def context_window(self) -> int | None:
        """The configured window, else what the server reports (asked once it is up)."""
        if not self._context_asked:
            probe = self.probe()
            self._context_asked = probe.up
            self._context_window = probe.context_window
        return self._context_window

    def probe(self) -> ProbeResult:
        try:
            return self._probe()
        except LLMProxyError as exc:
            return ProbeResult(backend=self.name, url=self.endpoint, up=False, detail=str(exc))

    def _probe(self) -> ProbeResult:
        raise NotImplementedError

    def close(self) -> None:
        self.http.close()


def max_tokens(params: GenerationParams) -> int:
    return FALLBACK_MAX_TOKENS if params.max_tokens is None else params.max_tokens


def sampler_fields(params: GenerationParams, names: dict[str, str]) -> dict[str, Any]:
    """``temperature``/``top_p``/``seed`` under the backend's names, leaving out those not set."""
    values = {"temperature": params.temperature, "top_p": params.top_p, "seed": params.seed}
    return {names.get(key, key): value for key, value in values.items() if value is not None}
