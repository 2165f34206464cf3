"""Ollama: POST /api/generate in raw mode (the prompt is already rendered), NDJSON streaming.

The model name is required. Sampler settings belong inside ``options``; the few request-level keys
(``keep_alive``, ``format`` ...) stay at the top. Ollama takes no GBNF grammar, only a JSON schema as
``format``. Raw mode refuses ``system``/``template``/``context``, so they are never sent. An over-long
prompt is cut silently by Ollama, so configure ``context_window`` (sent as ``num_ctx``).

Embeddings go to POST /api/embed (Ollama 0.3+), every input of a batch in one request, with ``truncate``
off so that an input over the context is refused, not cut; an older server gets one POST
/api/embeddings per input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llmproxy.backends._backend import HTTPBackend, max_tokens, sampler_fields
from llmproxy.backends._http import PROBE_TIMEOUT, Exchange, StreamExchange
from llmproxy.backends.base import (
    SAMPLERS,
    Capabilities,
    Completion,
    Embedded,
    EmbeddingInput,
    EmbeddingOptions,
    GenerationParams,
    ProbeResult,
    StreamDelta,
    sampler_names,
)
from llmproxy.errors import BackendHTTPError

PATH = "/api/generate"
SAMPLER_NAMES = sampler_names(*SAMPLERS)  # inside ``options``, under llama.cpp's names
TOP_LEVEL_KEYS = frozenset({"keep_alive", "format", "think", "truncate", "shift", "logprobs", "top_logprobs"})


def generate_request(prompt: str, params: GenerationParams, *, model: str, stream: bool,
                     context_window: int | None) -> dict[str, Any]:
    options = {k: v for k, v in params.extra.items() if k not in TOP_LEVEL_KEYS and k != "options"}
    options.update(params.extra.get("options") or {})
    options["num_predict"] = max_tokens(params)
    if params.stop:
        options["stop"] = list(params.stop)
    if context_window:
        options["num_ctx"] = context_window
    options.update(sampler_fields(params, SAMPLER_NAMES))
    body = {k: v for k, v in params.extra.items() if k in TOP_LEVEL_KEYS}
    if params.json_schema is not None:
        body["format"] = params.json_schema  # structured output: the call object's schema
    body.update(model=model, prompt=prompt, raw=True, stream=stream, options=options)
    return body


def _counts(payload: dict[str, Any]) -> tuple[int | None, int | None]:
    # Both are omitted when zero (e.g. a fully cached prompt): absent means "not reported".
    return payload.get("prompt_eval_count"), payload.get("eval_count")


def parse_generate(payload: dict[str, Any]) -> Completion:
    reason = "length" if payload.get("done_reason") == "length" else "stop"
    return Completion(payload["response"], reason, *_counts(payload))


def parse_stream_line(payload: dict[str, Any]) -> StreamDelta:
    if not payload["done"]:
        return StreamDelta(payload["response"])
    return StreamDelta(payload.get("response", ""), parse_generate(payload).finish_reason, *_counts(payload))


def num_ctx_parameter(show: dict[str, Any]) -> int | None:
    """``num_ctx`` from the Modelfile parameters in an /api/show answer (the served context, unlike
    ``model_info``'s training context)."""
    match = re.search(r"^num_ctx\s+(\d+)", show.get("parameters") or "", re.M)
    return int(match.group(1)) if match else None


def embed_request(inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, *, model: str,
                  context_window: int | None) -> dict[str, Any]:
    """POST /api/embed's body: texts only (Ollama takes no token ids)."""
    body: dict[str, Any] = {"model": model, "input": list(inputs), "truncate": False}
    if options.dimensions is not None:
        body["dimensions"] = options.dimensions
    if context_window:
        body["options"] = {"num_ctx": context_window}
    return body


def parse_embed(payload: dict[str, Any]) -> Embedded:
    """/api/embed's answer; ``prompt_eval_count`` is left out when 0 (``omitempty``)."""
    return Embedded([[float(value) for value in vector] for vector in payload["embeddings"]],
                    payload.get("prompt_eval_count"))


def parse_legacy_embedding(payload: dict[str, Any]) -> Embedded:
    """/api/embeddings' answer to one ``prompt``: ``{"embedding": [...]}``."""
    return Embedded([[float(value) for value in payload["embedding"]]])


class OllamaBackend(HTTPBackend):
    name = "ollama"
    default_port = 11434
    capabilities = Capabilities(grammar=False, streaming=True, tokenizer=False, json_schema=True, embeddings=True)
    endpoint_suffixes = ("/v1", "/api")
    samplers = SAMPLER_NAMES
    # Current Ollama shortens vectors (its docs name the field); an older one ignores it.
    embedding_dimensions_field = True
    model_hint = "e.g. model='dolphin2.2-mistral:7b-q6_K'; `ollama list` shows the models you have"
    # Sent with every request where set (a model loaded on demand: llmproxy.server.on_demand.remote), else
    # Ollama's default (5 minutes) would unload the model behind llmproxy's back.
    keep_alive: int | None = None

    def request_body(self, prompt: str, params: GenerationParams, *, stream: bool) -> dict[str, Any]:
        self.grammar_fields(params)  # refuses a grammar
        return self._kept(generate_request(prompt, params, model=str(self.model), stream=stream,
                                           context_window=self.configured_context_window))

    def _kept(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        return body

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        return Exchange(PATH, self.request_body(prompt, params, stream=False), parse_generate)

    def stream_exchange(self, prompt: str, params: GenerationParams) -> StreamExchange:
        return StreamExchange(PATH, self.request_body(prompt, params, stream=True), parse_stream_line, "ndjson")

    def embedding_exchange(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Exchange[Embedded]:
        if self.embedding_batch == 1:  # before /api/embed: one prompt a request
            return Exchange("/api/embeddings", {"model": self.model, "prompt": inputs[0]}, parse_legacy_embedding)
        return Exchange("/api/embed", self._kept(embed_request(inputs, options, model=str(self.model),
                                                               context_window=self.configured_context_window)),
                        parse_embed)

    def embedding_fallback(self, error: BackendHTTPError) -> bool:
        """A server older than /api/embed answers its path with Go's plain "404 page not found" (a model it
        lacks is a 404 with a JSON error, which stays an error)."""
        if error.status != 404 or self.embedding_batch == 1 or "page not found" not in error.body:
            return False
        self.embedding_batch = 1
        return True

    def _probe(self) -> ProbeResult:
        version = self.http.get_json("/api/version", timeout=PROBE_TIMEOUT)
        try:
            show = self.http.post_json("/api/show", {"model": self.model}, timeout=PROBE_TIMEOUT)
        except BackendHTTPError as exc:
            if exc.status != 404:
                raise
            return ProbeResult(backend=self.name, url=self.endpoint, up=False, model=self.model,
                               detail=f"model {self.model!r} is not installed; run `ollama pull {self.model}`")
        with self.http.expect_shape(self.http.url("/api/show")):
            window = self.configured_context_window or num_ctx_parameter(show)
            detail = f"ollama {version['version']}"
        return ProbeResult(backend=self.name, url=self.endpoint, up=True, model=self.model,
                           context_window=window, grammar=False, detail=detail)
