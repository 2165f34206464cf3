"""vLLM, or any other OpenAI-compatible server, through POST /v1/completions.

vLLM only answers for the model name it serves, so when none is configured discovery takes the first one
listed by /v1/models. Its grammar field changed: ``structured_outputs.grammar`` from v0.10.2, top-level
``guided_grammar`` before, and v0.12+ silently ignores ``guided_grammar`` - so the field is never guessed.
It is configured (``grammar_field``; ``grammar`` for a llama.cpp or llama-cpp-python server) or read off
the server's ``GET /version`` by discovery; until one of them tells, this backend takes no grammar (so
grammar "auto" falls back to repair alone), and a grammar asked for by name fails and says what to set.
Embeddings: POST /v1/embeddings of a pooling model (``vllm serve --task embed``), texts or token ids, with
``dimensions``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from llmproxy.backends._http import PROBE_TIMEOUT, Exchange, StreamExchange
from llmproxy.backends._openai import OpenAICompletionsBackend
from llmproxy.backends.base import (
    Capabilities,
    Completion,
    GenerationParams,
    ProbeResult,
    sampler_names,
)
from llmproxy.errors import BackendProtocolError, LLMProxyError, UnsupportedRequestError


def grammar_fields(grammar_key: str, grammar: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    """The grammar under vLLM's new nested field (merged with any other structured_outputs setting)
    or under a top-level field such as the old ``guided_grammar``."""
    if grammar is None:
        return {}
    if grammar_key == "structured_outputs":
        return {"structured_outputs": {**extra.get("structured_outputs", {}), "grammar": grammar}}
    return {grammar_key: grammar}


NEW_FIELD_SINCE = (0, 10, 2)


def grammar_key_for_version(version: str) -> str:
    """The grammar field a vLLM of ``version`` reads (ValueError if it is not a version number)."""
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    if len(numbers) < 2:
        raise ValueError(version)
    return "structured_outputs" if numbers >= NEW_FIELD_SINCE else "guided_grammar"


class VLLMBackend(OpenAICompletionsBackend):
    name = "vllm"
    default_port = 8000
    # The type takes grammars; an instance does once it knows the field (configured or discovered).
    capabilities = Capabilities(grammar=True, streaming=True, tokenizer=True, embeddings=True, embedding_tokens=True)
    embedding_dimensions_field = True  # shortens a Matryoshka model's vectors; refuses (400) for others
    # vLLM's sampling extras; it has no typical-p and no Mirostat.
    samplers = sampler_names("top_k", "min_p", "presence_penalty", "frequency_penalty",
                             repeat_penalty="repetition_penalty")

    def __init__(self, endpoint: str | None = None, **options: Any) -> None:
        super().__init__(endpoint, **options)
        self.capabilities = dataclasses.replace(type(self).capabilities, grammar=self.grammar_key is not None)

    def _learn(self, found: ProbeResult) -> None:
        if self.model is None:
            self.model = found.model
        if self.grammar_key is None and found.grammar_field is not None:
            self.grammar_key = found.grammar_field
            self.capabilities = dataclasses.replace(self.capabilities, grammar=True)

    def grammar_fields(self, params: GenerationParams) -> dict[str, Any]:
        if params.grammar is None:
            return {}
        if self.grammar_key is None:
            raise UnsupportedRequestError(
                f"cannot tell which grammar field the server at {self.endpoint} reads (its /version gave no vLLM"
                " version). Set grammar_field: 'structured_outputs' for vLLM 0.10.2 or newer, 'guided_grammar'"
                " for older vLLM, 'grammar' for llama.cpp or llama-cpp-python servers - or turn the grammar off.",
                param="grammar",
            )
        return grammar_fields(self.grammar_key, params.grammar, params.extra)

    def completion_exchange(self, prompt: str, params: GenerationParams) -> Exchange[Completion]:
        self._check_model()
        return super().completion_exchange(prompt, params)

    def stream_exchange(self, prompt: str, params: GenerationParams) -> StreamExchange:
        self._check_model()
        return super().stream_exchange(prompt, params)

    def _check_model(self) -> None:
        # Without a model name vLLM answers 400/404; say why there is none instead. (A server that is
        # down has no discovery yet: the request then reports the refused connection itself.)
        if self.model is None and self._discovered is not None:
            url = self.http.url("/v1/models")
            raise BackendProtocolError(f"{self.name} at {url} names no model to use ({self._discovered.detail});"
                                       " set the model name", backend=self.name, url=url)

    def count_exchange(self, text: str) -> Exchange[int]:
        # vLLM's /tokenize lives at the root, not under /v1.
        return Exchange("/tokenize", {"model": self.model, "prompt": text}, lambda payload: int(payload["count"]))

    def _probe(self) -> ProbeResult:
        result = super()._probe()
        if self.model is not None and result.model != self.model:
            return ProbeResult(backend=self.name, url=self.endpoint, up=False, model=self.model,
                               detail=f"model {self.model!r} is not served here; {result.detail}")
        if result.model is None:
            return dataclasses.replace(result, up=False, detail="/v1/models lists no model")
        key = self.grammar_key or self._version_grammar_key()
        return dataclasses.replace(result, grammar=key is not None, grammar_field=key)

    def _version_grammar_key(self) -> str | None:
        """The grammar field for the server's vLLM version; None when /version names none."""
        try:
            version = self.http.get_json("/version", timeout=PROBE_TIMEOUT)["version"]
            return grammar_key_for_version(str(version))
        except (LLMProxyError, KeyError, TypeError, ValueError):
            return None  # it answered /v1/models, but not as a vLLM we can place a grammar for
