"""The OpenAI-compatible completion API that text-generation-webui, LM Studio and vLLM all speak, and
OpenAI's embeddings API (POST /v1/embeddings), which they, llama.cpp and koboldcpp speak too.

Pure request building and reply parsing (unit-tested with no server), and ``OpenAICompletionsBackend``,
the base the three backend modules specialise with their own extra fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmproxy.backends._backend import HTTPBackend, max_tokens, sampler_fields
from llmproxy.backends._http import PROBE_TIMEOUT, Exchange, StreamExchange
from llmproxy.backends.base import (
    Completion,
    Embedded,
    EmbeddingInput,
    EmbeddingOptions,
    FinishReason,
    GenerationParams,
    ProbeResult,
    StreamDelta,
)


def openai_request(
    params: GenerationParams,
    input_fields: dict[str, Any],
    *,
    model: str | None,
    stream: bool,
    samplers: Mapping[str, str],
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A /v1/completions (``input_fields={"prompt": ...}``) or /v1/chat/completions body; ``samplers``:
    the server's names for llmproxy's (``Backend.samplers``).

    Backend-specific settings go in first, so the translated common parameters win over them.
    """
    body = dict(params.extra)
    body.update(input_fields)
    body["max_tokens"] = max_tokens(params)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}  # else usage never arrives in a stream
    if params.stop:
        body["stop"] = list(params.stop)
    if model:
        body["model"] = model
    body.update(sampler_fields(params, samplers))
    body.update(fields or {})
    return body


def finish_reason(value: Any) -> FinishReason | None:
    """OpenAI-style finish reason -> ours; koboldcpp sends the string "null" mid-stream."""
    if value is None or value in ("null", ""):
        return None
    return "length" if value == "length" else "stop"


def stop_word(choice: dict[str, Any]) -> str | None:
    """vLLM's ``stop_reason``: the stop string that ended the answer when it is a string (an int is a stop
    token id; null is EOS or the length). Servers without the field report none."""
    value = choice.get("stop_reason")
    return value if isinstance(value, str) and value and choice.get("finish_reason") == "stop" else None


def _choice_text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return choice["text"] or ""
    part = choice.get("message") or choice.get("delta") or {}
    return part.get("content") or ""


def _usage(payload: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = payload.get("usage") or {}
    return usage.get("prompt_tokens"), usage.get("completion_tokens")


def parse_completion(payload: dict[str, Any]) -> Completion:
    choice = payload["choices"][0]
    prompt_tokens, completion_tokens = _usage(payload)
    return Completion(_choice_text(choice), finish_reason(choice.get("finish_reason")) or "stop",
                      prompt_tokens, completion_tokens, stop_word=stop_word(choice))


def parse_chunk(payload: dict[str, Any]) -> StreamDelta:
    """One streamed chunk; a usage-only chunk (``choices: []``) carries just the counts."""
    prompt_tokens, completion_tokens = _usage(payload)
    if not payload["choices"]:
        return StreamDelta("", None, prompt_tokens, completion_tokens)
    choice = payload["choices"][0]
    return StreamDelta(_choice_text(choice), finish_reason(choice.get("finish_reason")),
                       prompt_tokens, completion_tokens, stop_word(choice))


def parse_models(payload: dict[str, Any], wanted: str | None) -> tuple[list[str], dict[str, Any] | None]:
    """The served model ids from /v1/models, and the entry for ``wanted`` (else the first one)."""
    entries = payload["data"]
    ids = [entry["id"] for entry in entries]
    match = [entry for entry in entries if entry["id"] == wanted] if wanted else entries[:1]
    return ids, (match[0] if match else None)


EMBEDDINGS_PATH = "/v1/embeddings"


def embeddings_request(inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, *, model: str | None,
                       dimensions: bool) -> dict[str, Any]:
    """A /v1/embeddings body: the inputs as a list (texts, or token id lists), floats back. ``dimensions``:
    whether the server's protocol takes the field (an unknown one may fail the request)."""
    body: dict[str, Any] = {"input": [item if isinstance(item, str) else list(item) for item in inputs],
                            "encoding_format": "float"}
    if model:
        body["model"] = model
    if dimensions and options.dimensions is not None:
        body["dimensions"] = options.dimensions
    return body


def pooled(embedding: list[Any]) -> list[float]:
    """One vector: ``embedding`` itself, or the mean of its rows where a server that does not pool sends
    one per token (llama-cpp-python's server on a generation model, llama.cpp with ``--pooling none``)."""
    if embedding and isinstance(embedding[0], list):
        width = len(embedding[0])
        return [sum(float(row[i]) for row in embedding) / len(embedding) for i in range(width)]
    return [float(value) for value in embedding]


def parse_embeddings(payload: dict[str, Any]) -> Embedded:
    """``data`` in index order (the API lets a server answer in any order); ``usage.prompt_tokens`` where it
    counts them (text-generation-webui sends 0: not counted)."""
    entries = sorted(payload["data"], key=lambda entry: entry["index"])
    vectors = [pooled(entry["embedding"]) for entry in entries]
    prompt_tokens = (payload.get("usage") or {}).get("prompt_tokens") or None
    return Embedded(vectors, prompt_tokens)


class OpenAICompletionsBackend(HTTPBackend):
    """A backend speaking POST /v1/completions with SSE streaming and GET /v1/models."""

    path = "/v1/completions"

    def request_body(self, prompt: str, params: GenerationParams, *, stream: bool) -> dict[str, Any]:
        """The request for ``prompt``; no I/O. Subclasses add their own fields."""
        return openai_request(params, {"prompt": prompt}, model=self.model, stream=stream, samplers=self.samplers,
                              fields=self.grammar_fields(params))

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        return Exchange(self.path, self.request_body(prompt, params, stream=False), parse_completion)

    def stream_exchange(self, prompt: str, params: GenerationParams) -> StreamExchange:
        return StreamExchange(self.path, self.request_body(prompt, params, stream=True), parse_chunk)

    def embedding_exchange(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Exchange[Embedded]:
        body = embeddings_request(inputs, options, model=self.model, dimensions=self.embedding_dimensions_field)
        return Exchange(EMBEDDINGS_PATH, body, parse_embeddings)

    def _probe(self) -> ProbeResult:
        url = self.http.url("/v1/models")
        payload = self.http.get_json("/v1/models", timeout=PROBE_TIMEOUT)
        with self.http.expect_shape(url):
            ids, entry = parse_models(payload, self.model)
        return ProbeResult(
            backend=self.name, url=self.endpoint, up=True,
            model=entry["id"] if entry else None,
            context_window=self.configured_context_window or (entry or {}).get("max_model_len"),
            grammar=self.grammar_key is not None, grammar_field=self.grammar_key, detail=f"serves: {', '.join(ids)}",
        )
