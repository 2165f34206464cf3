"""koboldcpp through its KoboldAI API: POST /api/v1/generate, streaming from the separate
/api/extra/generate/stream, /api/extra/tokencount, /api/extra/abort.

Kobold calls the stop strings ``stop_sequence`` (MemGPT sent ``stop``, so they never arrived) and keeps a
matched stop string in the text unless ``trim_stop`` is set. Its stream frames every event as
``event: message`` and says ``finish_reason: "null"`` (a string) until the last one; there is no
``[DONE]``. A stream the caller abandons is aborted on the server, which otherwise keeps generating.
Embeddings (a server started with ``--embeddingsmodel``) go to its OpenAI-compatible POST /v1/embeddings,
texts only, with ``truncate`` off: an input over its embedding context comes back empty, which is an
error here, not a vector of half the text.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from llmproxy.backends._backend import HTTPBackend, max_tokens, sampler_fields
from llmproxy.backends._http import PROBE_TIMEOUT, Exchange, StreamExchange
from llmproxy.backends._openai import EMBEDDINGS_PATH, embeddings_request, finish_reason, parse_embeddings
from llmproxy.backends.base import (
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

log = logging.getLogger(__name__)
GENERATE = "/api/v1/generate"
STREAM = "/api/extra/generate/stream"
# The KoboldAI API's own names; it has no frequency penalty (its OpenAI endpoint folds one into presence).
SAMPLER_NAMES = sampler_names("top_k", "min_p", "presence_penalty", "mirostat", "mirostat_tau", "mirostat_eta",
                              seed="sampler_seed", typical_p="typical", repeat_penalty="rep_pen")


def generate_request(prompt: str, params: GenerationParams, *, context_window: int | None,
                     grammar_fields: dict[str, Any], genkey: str | None = None) -> dict[str, Any]:
    body = dict(params.extra)
    body["prompt"] = prompt
    body["max_length"] = max_tokens(params)
    body["trim_stop"] = True
    if params.stop:
        body["stop_sequence"] = list(params.stop)
    if context_window:
        body["max_context_length"] = context_window
    if genkey:
        body["genkey"] = genkey  # names this generation, so abort stops it and no other user's
    body.update(sampler_fields(params, SAMPLER_NAMES))
    body.update(grammar_fields)
    return body


def parse_generate(payload: dict[str, Any]) -> Completion:
    """Token counts appear in results from about v1.80; older versions report none."""
    result = payload["results"][0]
    return Completion(result["text"], finish_reason(result.get("finish_reason")) or "stop",
                      result.get("prompt_tokens"), result.get("completion_tokens"))


def parse_stream_event(payload: dict[str, Any]) -> StreamDelta:
    return StreamDelta(payload["token"], finish_reason(payload.get("finish_reason")),
                       payload.get("prompt_tokens"), payload.get("completion_tokens"))


class KoboldCppBackend(HTTPBackend):
    name = "koboldcpp"
    default_port = 5001
    capabilities = Capabilities(grammar=True, streaming=True, tokenizer=True, embeddings=True)
    grammar_key = "grammar"
    endpoint_suffixes = ("/v1", "/api")  # Kobold clients are usually given http://host:5001/api
    samplers = SAMPLER_NAMES

    def request_body(self, prompt: str, params: GenerationParams, genkey: str | None = None) -> dict[str, Any]:
        return generate_request(prompt, params, context_window=self.configured_context_window,
                                grammar_fields=self.grammar_fields(params), genkey=genkey)

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        return Exchange(GENERATE, self.request_body(prompt, params), parse_generate)

    def stream_exchange(self, prompt: str, params: GenerationParams) -> StreamExchange:
        genkey = f"KCPP{secrets.token_hex(4)}"
        abort = Exchange("/api/extra/abort", {"genkey": genkey}, lambda payload: None)
        return StreamExchange(STREAM, self.request_body(prompt, params, genkey), parse_stream_event, abandoned=abort)

    def embedding_exchange(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Exchange[Embedded]:
        body = {**embeddings_request(inputs, options, model=None, dimensions=False), "truncate": False}
        return Exchange(EMBEDDINGS_PATH, body, parse_embeddings)

    def count_exchange(self, text: str) -> Exchange[int]:
        return Exchange("/api/extra/tokencount", {"prompt": text}, lambda payload: int(payload["value"]))

    def _probe(self) -> ProbeResult:
        model = self.http.get_json("/api/v1/model", timeout=PROBE_TIMEOUT)
        try:
            window = self.http.get_json("/api/extra/true_max_context_length", timeout=PROBE_TIMEOUT)
        except BackendHTTPError:
            window = {}  # versions before the endpoint existed
        with self.http.expect_shape(self.http.url("/api/v1/model")):
            name = str(model["result"]).removeprefix("koboldcpp/")
            served = window.get("value")
        return ProbeResult(backend=self.name, url=self.endpoint, up=True, model=name,
                           context_window=self.configured_context_window or served, grammar=True,
                           grammar_field=self.grammar_key)
