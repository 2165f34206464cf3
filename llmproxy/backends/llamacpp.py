"""llama.cpp's own server (``llama-server``): POST /completion, /tokenize, /props, /health.

The native endpoint is used rather than /v1/completions because it exists in every server version,
reports the stop reason (with the stop string that matched) and token counts, and takes ``grammar``
directly. Its stream is SSE without a ``[DONE]`` marker: the event with ``stop: true`` ends it. GET /props
tells the model file, the per-slot context and the model's chat template (with the BOS/EOS texts in newer
servers).

Embeddings (a server started with ``--embeddings``) go to OpenAI's POST /v1/embeddings, in batches; a
server older than it (before 2024) gets one POST /embedding per input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from llmproxy.backends._backend import HTTPBackend, max_tokens, sampler_fields
from llmproxy.backends._http import PROBE_TIMEOUT, Exchange, StreamExchange
from llmproxy.backends._openai import EMBEDDINGS_PATH, embeddings_request, parse_embeddings, pooled
from llmproxy.backends.base import (
    SAMPLERS,
    Capabilities,
    ChatTemplate,
    Completion,
    Embedded,
    EmbeddingInput,
    EmbeddingOptions,
    FinishReason,
    GenerationParams,
    ProbeResult,
    StreamDelta,
    TokenLogprob,
    sampler_names,
)
from llmproxy.errors import BackendHTTPError, ContextWindowExceededError

PATH = "/completion"
SAMPLER_NAMES = sampler_names(*SAMPLERS)  # llmproxy's sampler names are llama.cpp's
TRIGGER_WORD = 1  # llama.cpp's common_grammar_trigger_type: 0 token, 1 word, 2 pattern, 3 full pattern


def completion_request(prompt: str, params: GenerationParams, *, model: str | None, stream: bool,
                       grammar_fields: dict[str, Any]) -> dict[str, Any]:
    body = dict(params.extra)
    body["prompt"] = prompt
    body["n_predict"] = max_tokens(params)
    body["stream"] = stream
    if params.stop:
        body["stop"] = list(params.stop)
    if model:
        body["model"] = model  # only matters in router mode; ignored otherwise
    body.update(sampler_fields(params, SAMPLER_NAMES))
    body.update(grammar_fields)
    if params.logprobs is not None:
        body["n_probs"] = max(params.logprobs, 1)  # 0 would report none; the top list is cut back later
    return body


def _finish_reason(payload: dict[str, Any]) -> FinishReason:
    # ``stop_type`` since late 2024; boolean ``stopped_limit`` before.
    return "length" if payload.get("stop_type") == "limit" or payload.get("stopped_limit") else "stop"


def _stop_word(payload: dict[str, Any]) -> str | None:
    # ``stopping_word`` names the stop string that matched; it ended the answer only when ``stop_type`` is
    # "word" (since late 2024) or the boolean ``stopped_word`` is set (before). Otherwise it is "".
    word = payload.get("stopping_word")
    if payload.get("stop_type") == "word" or payload.get("stopped_word") is True:
        return word if isinstance(word, str) and word else None
    return None


def _refuse_truncated(payload: dict[str, Any]) -> None:
    # Old servers cut an over-long prompt instead of refusing it; an answer to half a prompt is worse
    # than an error the agent knows how to handle (summarise and retry).
    if payload.get("truncated"):
        window = (payload.get("generation_settings") or {}).get("n_ctx") or 0
        raise ContextWindowExceededError(payload.get("tokens_evaluated") or 0, window,
                                         detail="llama.cpp cut the prompt to fit (truncated: true).")


def _final(payload: dict[str, Any], text: str) -> StreamDelta:
    _refuse_truncated(payload)
    # ``tokens_evaluated`` was often 0 in late-2023 servers: 0 prompt tokens means "not reported".
    return StreamDelta(text, _finish_reason(payload), payload.get("tokens_evaluated") or None,
                       payload.get("tokens_predicted"), _stop_word(payload))


def count_token_ids(reply: str) -> int | None:
    """How many ids /tokenize's reply ``{"tokens":[1,2,...]}`` holds, counted without parsing them
    (the 524,000 ids of a 2 MiB prompt took 40 ms, on the server's event loop); None for any other
    shape, which is then read as JSON."""
    head, tail = _TOKEN_IDS_HEAD.match(reply), _TOKEN_IDS_TAIL.search(reply, len(reply) - 64)
    if head is None or tail is None or reply.find('"', head.end()) >= 0:  # ids only, no pieces
        return None
    commas = reply.count(",", head.end(), tail.start())
    return commas + 1 if commas or reply[head.end():tail.start()].strip() else 0


_TOKEN_IDS_HEAD = re.compile(r'\s*\{\s*"tokens"\s*:\s*\[')
_TOKEN_IDS_TAIL = re.compile(r"\]\s*\}\s*\Z")


def parse_completion(payload: dict[str, Any]) -> Completion:
    final = _final(payload, payload["content"])
    return Completion(final.text, final.finish_reason or "stop", final.prompt_tokens, final.completion_tokens,
                      _logprobs(payload.get("completion_probabilities")), final.stop_word)


def _logprobs(tokens: Any) -> tuple[TokenLogprob, ...] | None:
    """``completion_probabilities``: log probabilities since 2025 ({token, logprob, top_logprobs}),
    probabilities before ({content, probs: [{tok_str, prob}]}, the chosen token first)."""
    if not isinstance(tokens, list):
        return None
    read = []
    for item in tokens:
        if "logprob" in item:
            top = tuple((t["token"], t["logprob"]) for t in item.get("top_logprobs") or ())
            read.append(TokenLogprob(item["token"], item["logprob"], top))
        else:
            top = tuple((t["tok_str"], math.log(t["prob"]) if t["prob"] > 0 else -math.inf) for t in item["probs"])
            chosen = next((lp for tok, lp in top if tok == item["content"]), top[0][1] if top else 0.0)
            read.append(TokenLogprob(item["content"], chosen, top))
    return tuple(read)


def parse_stream_event(payload: dict[str, Any]) -> StreamDelta:
    """A text delta, or the closing event (``stop: true``) with the reason, counts and stop string."""
    return _final(payload, payload.get("content", "")) if payload["stop"] else StreamDelta(payload["content"])


def parse_props(payload: dict[str, Any]) -> tuple[str | None, int | None]:
    """(model file name, per-slot context size) from GET /props, old or new layout."""
    settings = payload.get("default_generation_settings") or {}
    path = payload.get("model_path") or settings.get("model")
    return (re.split(r"[\\/]", path)[-1] if path else None), settings.get("n_ctx")


def props_chat_template(payload: dict[str, Any], source: str) -> ChatTemplate | None:
    """The chat template in GET /props (servers from early 2025); None when there is none. The BOS/EOS
    texts came later; ``chat_template_tool_use`` only with ``--jinja`` and a model that has one."""

    def text(key: str) -> str | None:
        value = payload.get(key)
        return value if isinstance(value, str) and value.strip() else None

    template = text("chat_template")
    if template is None:
        return None
    return ChatTemplate(text=template, bos_token=text("bos_token"), eos_token=text("eos_token"), source=source,
                        tool_use_text=text("chat_template_tool_use"))


def native_embedding_request(item: EmbeddingInput) -> dict[str, Any]:
    """POST /embedding's body for one input (a text, or token ids)."""
    return {"content": item if isinstance(item, str) else list(item)}


def parse_native_embedding(payload: Any) -> Embedded:
    """/embedding's answer to one input: ``{"embedding": [...]}`` (servers before December 2024), or
    ``[{"index": 0, "embedding": [[...]]}]``: one vector when the server pools, one per token with
    ``--pooling none`` (averaged here, as mean pooling does)."""
    return Embedded([pooled(payload["embedding"] if isinstance(payload, dict) else payload[0]["embedding"])])


class LlamaCppBackend(HTTPBackend):
    name = "llamacpp"
    default_port = 8080
    # choice_grammar: the first step's likeliest tokens (n_probs) are asked for first (_probed_choice).
    capabilities = Capabilities(grammar=True, lazy_grammar=True, choice_grammar=True, streaming=True, tokenizer=True,
                                logprobs=True, embeddings=True, embedding_tokens=True)
    grammar_key = "grammar"
    default_settings = {**HTTPBackend.default_settings, "cache_prompt": True}  # false by default before 2024
    samplers = SAMPLER_NAMES

    def request_body(self, prompt: str, params: GenerationParams, *, stream: bool) -> dict[str, Any]:
        return completion_request(prompt, params, model=self.model, stream=stream,
                                  grammar_fields=self.grammar_fields(params))

    def grammar_fields(self, params: GenerationParams) -> dict[str, Any]:
        """An optional call goes as a lazy grammar: the model writes freely until a trigger word, and
        the server constrains from there (the special tokens calls are written with kept as text)."""
        lazy = params.lazy_grammar
        if lazy is None:
            return super().grammar_fields(params)
        return {"grammar": lazy.text, "grammar_lazy": True,
                "grammar_triggers": [{"type": TRIGGER_WORD, "value": word} for word in lazy.triggers],
                "preserved_tokens": list(lazy.preserved_tokens)}

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        return Exchange(PATH, self.request_body(prompt, params, stream=False), parse_completion)

    def stream_exchange(self, prompt: str, params: GenerationParams) -> StreamExchange:
        return StreamExchange(PATH, self.request_body(prompt, params, stream=True), parse_stream_event)

    def embedding_exchange(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Exchange[Embedded]:
        if self.embedding_batch == 1:  # an older server: its own endpoint, one input a request
            return Exchange("/embedding", native_embedding_request(inputs[0]), parse_native_embedding)
        return Exchange(EMBEDDINGS_PATH, embeddings_request(inputs, options, model=self.model, dimensions=False),
                        parse_embeddings)

    def embedding_fallback(self, error: BackendHTTPError) -> bool:
        """A server without /v1/embeddings (404) is asked at /embedding, one input at a time, from now on."""
        if error.status != 404 or self.embedding_batch == 1:
            return False
        self.embedding_batch = 1
        return True

    def count_exchange(self, text: str) -> Exchange[int]:
        # add_special: count the BOS token /completion adds too (older servers ignore the flag).
        return Exchange("/tokenize", {"content": text, "add_special": True}, lambda payload: len(payload["tokens"]),
                        count_token_ids)

    def _probe(self) -> ProbeResult:
        self.http.get_json("/health", timeout=PROBE_TIMEOUT)  # 503 while the model loads
        try:
            props = self.http.get_json("/props", timeout=PROBE_TIMEOUT)
        except BackendHTTPError:
            props = {}
        url = self.http.url("/props")
        with self.http.expect_shape(url):
            model, n_ctx = parse_props(props)
            template = props_chat_template(props, f"GET {url}")
        return ProbeResult(backend=self.name, url=self.endpoint, up=True, model=model or self.model,
                           context_window=self.configured_context_window or n_ctx, grammar=True,
                           grammar_field=self.grammar_key, chat_template=template)
