"""text-generation-webui (oobabooga): its OpenAI-compatible API (``webui``, POST /v1/completions) and
the blocking API removed in November 2023 (``webui-legacy``, POST /api/v1/generate).

Both take a GBNF grammar as ``grammar_string`` and a per-request context size as ``truncation_length``
(sent when a context window is configured; otherwise the server's UI setting applies). The legacy API
streamed over a separate WebSocket, which is not supported: ``webui-legacy`` answers in one piece.
``webui`` embeds texts at its OpenAI-compatible POST /v1/embeddings (by its own sentence-transformers
model, whatever the request names; it counts no tokens).
"""

from __future__ import annotations

from typing import Any

from llmproxy.backends._backend import HTTPBackend, max_tokens, sampler_fields
from llmproxy.backends._http import PROBE_TIMEOUT, Exchange
from llmproxy.backends._openai import OpenAICompletionsBackend
from llmproxy.backends.base import (
    Capabilities,
    Completion,
    GenerationParams,
    ProbeResult,
    sampler_names,
)

# text-generation-webui's generation parameters (its OpenAI API takes them all beside OpenAI's own); the
# legacy API read a fixed list that had no min-p and no presence or frequency penalty.
WEBUI_NAMES = {"repeat_penalty": "repetition_penalty", "mirostat": "mirostat_mode"}
SAMPLER_NAMES = sampler_names("top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty", "mirostat_tau",
                              "mirostat_eta", **WEBUI_NAMES)
LEGACY_SAMPLER_NAMES = sampler_names("top_k", "typical_p", "mirostat_tau", "mirostat_eta", **WEBUI_NAMES)


class WebUIBackend(OpenAICompletionsBackend):
    name = "webui"
    default_port = 5000
    capabilities = Capabilities(grammar=True, streaming=True, tokenizer=True, embeddings=True)
    grammar_key = "grammar_string"
    samplers = SAMPLER_NAMES

    def request_body(self, prompt: str, params: GenerationParams, *, stream: bool) -> dict[str, Any]:
        body = super().request_body(prompt, params, stream=stream)
        if self.configured_context_window:
            body["truncation_length"] = self.configured_context_window
        return body

    def count_exchange(self, text: str) -> Exchange[int]:
        return Exchange("/v1/internal/token-count", {"text": text}, lambda payload: int(payload["length"]))


def legacy_request(prompt: str, params: GenerationParams, *, context_window: int | None,
                   grammar_fields: dict[str, Any]) -> dict[str, Any]:
    """A /api/v1/generate body in the legacy API's vocabulary."""
    body = dict(params.extra)
    body["prompt"] = prompt
    body["max_new_tokens"] = max_tokens(params)
    if params.stop:
        body["stopping_strings"] = list(params.stop)
    if context_window:
        body["truncation_length"] = context_window
    body.update(sampler_fields(params, LEGACY_SAMPLER_NAMES))
    body.update(grammar_fields)
    return body


def parse_legacy(payload: dict[str, Any]) -> Completion:
    """The legacy API reports neither a stop reason nor token counts."""
    return Completion(payload["results"][0]["text"])


class WebUILegacyBackend(HTTPBackend):
    name = "webui-legacy"
    default_port = 5000
    capabilities = Capabilities(grammar=True, streaming=False, tokenizer=True)
    grammar_key = "grammar_string"
    endpoint_suffixes = ("/v1", "/api")
    samplers = LEGACY_SAMPLER_NAMES

    def request_body(self, prompt: str, params: GenerationParams) -> dict[str, Any]:
        return legacy_request(prompt, params, context_window=self.configured_context_window,
                              grammar_fields=self.grammar_fields(params))

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        return Exchange("/api/v1/generate", self.request_body(prompt, params), parse_legacy)

    def count_exchange(self, text: str) -> Exchange[int]:
        return Exchange("/api/v1/token-count", {"prompt": text},
                        lambda payload: int(payload["results"][0]["tokens"]))

    def _probe(self) -> ProbeResult:
        payload = self.http.get_json("/api/v1/model", timeout=PROBE_TIMEOUT)
        with self.http.expect_shape(self.http.url("/api/v1/model")):
            model = payload["result"]
        return ProbeResult(backend=self.name, url=self.endpoint, up=True, model=model,
                           context_window=self.configured_context_window, grammar=True,
                           grammar_field=self.grammar_key)
