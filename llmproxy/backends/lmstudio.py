"""LM Studio: POST /v1/completions (``lmstudio``) or, for LM Studio <= 0.2.8, the whole prompt as one
user message to /v1/chat/completions (``lmstudio-legacy``).

LM Studio takes no grammar. MemGPT's ``input_prefix``/``lmstudio.context_overflow_policy`` extensions are
not sent: current versions reject the numeric policy. The context size is only found in the native
/api/v0/models listing. Embeddings: OpenAI's POST /v1/embeddings, texts only, by the embedding model named.
A model loaded on demand gets its ``ttl`` with each request (LM Studio 0.3.9+ unloads a model it loaded
itself after that many idle seconds; llmproxy.server.on_demand.lmstudio).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from llmproxy.backends._http import PROBE_TIMEOUT, Exchange
from llmproxy.backends._openai import OpenAICompletionsBackend, openai_request
from llmproxy.backends.base import (Capabilities, Embedded, EmbeddingInput, EmbeddingOptions, GenerationParams,
                                    ProbeResult, sampler_names)
from llmproxy.errors import BackendError


def loaded_context_length(payload: dict[str, Any], model: str | None) -> int | None:
    """``max_context_length`` of ``model`` (else of the loaded model) in an /api/v0/models listing."""
    for entry in payload.get("data", []):
        if entry.get("id") == model or (model is None and entry.get("state") == "loaded"):
            return entry.get("max_context_length")
    return None


class LMStudioBackend(OpenAICompletionsBackend):
    name = "lmstudio"
    default_port = 1234
    capabilities = Capabilities(grammar=False, streaming=True, tokenizer=False, embeddings=True)
    samplers = sampler_names("top_k", "repeat_penalty", "presence_penalty", "frequency_penalty")  # as its docs list
    ttl: int | None = None  # idle seconds LM Studio keeps the model it loaded for a request (None: its default)

    def request_body(self, prompt: str, params: GenerationParams, *, stream: bool) -> dict[str, Any]:
        return self._timed(super().request_body(prompt, params, stream=stream))

    def embedding_exchange(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Exchange[Embedded]:
        exchange = super().embedding_exchange(inputs, options)
        return dataclasses.replace(exchange, body=self._timed(exchange.body))

    def _timed(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.ttl is not None:
            body["ttl"] = self.ttl
        return body

    def _probe(self) -> ProbeResult:
        result = super()._probe()
        if result.context_window is not None:
            return result
        try:
            native = self.http.get_json("/api/v0/models", timeout=PROBE_TIMEOUT)
        except BackendError:
            return result  # older LM Studio: no native API, context size unknown
        with self.http.expect_shape(self.http.url("/api/v0/models")):
            window = loaded_context_length(native, self.model)
        return dataclasses.replace(result, context_window=window)


class LMStudioLegacyBackend(LMStudioBackend):
    name = "lmstudio-legacy"
    path = "/v1/chat/completions"

    def request_body(self, prompt: str, params: GenerationParams, *, stream: bool) -> dict[str, Any]:
        self.grammar_fields(params)  # refuses a grammar
        messages = [{"role": "user", "content": prompt}]
        return openai_request(params, {"messages": messages}, model=self.model, stream=stream, samplers=self.samplers)
