"""vLLM, or any other OpenAI-compatible server, through POST /v1/completions.

vLLM only answers for the model name it serves, so when none is configured the first one listed by
/v1/models is used. Its grammar field changed: ``structured_outputs.grammar`` from v0.10.2, top-level
``guided_grammar`` before, and v0.12+ silently ignores ``guided_grammar`` - so the field is never guessed.
It is configured (``grammar_field``; ``grammar`` for a llama.cpp or llama-cpp-python server) or read off
the server's ``GET /version``; when neither works a grammar request fails and says what to set.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from llmproxy.backends._http import PROBE_TIMEOUT
from llmproxy.backends._openai import OpenAICompletionsBackend, parse_models
from llmproxy.backends.base import Capabilities, Completion, GenerationParams, ProbeResult, StreamDelta
from llmproxy.errors import (
    BackendConnectionError,
    BackendProtocolError,
    BackendTimeoutError,
    LLMProxyError,
    UnsupportedRequestError,
)


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

    def __init__(self, endpoint: str | None = None, *, grammar_field: str | None = None, **options: Any) -> None:
        super().__init__(endpoint, **options)
        self.grammar_key = grammar_field  # None: read off GET /version on first use
        self._version_unknown = False

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        # Grammar only where the field is known: "auto" then falls back to repair alone, never to a
        # field the server would silently ignore.
        return Capabilities(grammar=self._known_grammar_key() is not None, streaming=True, tokenizer=True)

    def grammar_fields(self, params: GenerationParams) -> dict[str, Any]:
        if params.grammar is None:
            return {}
        key = self._known_grammar_key()
        if key is None:
            raise UnsupportedRequestError(
                f"cannot tell which grammar field the server at {self.endpoint} reads (its /version gave no vLLM"
                " version). Set grammar_field: 'structured_outputs' for vLLM 0.10.2 or newer, 'guided_grammar'"
                " for older vLLM, 'grammar' for llama.cpp or llama-cpp-python servers - or turn the grammar off.",
                param="grammar",
            )
        return grammar_fields(key, params.grammar, params.extra)

    def _known_grammar_key(self) -> str | None:
        if self.grammar_key is None and not self._version_unknown:
            try:
                version = self.http.get_json("/version", timeout=PROBE_TIMEOUT)["version"]
                self.grammar_key = grammar_key_for_version(str(version))
            except (BackendConnectionError, BackendTimeoutError):
                pass  # not up yet (the server often starts first): ask again next time
            except (LLMProxyError, KeyError, TypeError, ValueError):
                self._version_unknown = True  # it answered, but not as a vLLM we can place a grammar for
        return self.grammar_key

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        self._resolve_model()
        return super().complete(prompt, params)

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        self._resolve_model()
        return super().stream(prompt, params)

    def _resolve_model(self) -> None:
        if self.model is not None:
            return
        url = self.http.url("/v1/models")
        payload = self.http.get_json("/v1/models", timeout=PROBE_TIMEOUT)
        with self.http.expect_shape(url):
            _, entry = parse_models(payload, None)
        if entry is None:
            raise BackendProtocolError(f"{self.name} at {url} serves no model", backend=self.name, url=url)
        self.model = entry["id"]

    def _count_tokens(self, text: str) -> int:
        # vLLM's /tokenize lives at the root, not under /v1.
        payload = self.http.post_json("/tokenize", {"model": self.model, "prompt": text})
        with self.http.expect_shape(self.http.url("/tokenize")):
            return int(payload["count"])

    def _probe(self) -> ProbeResult:
        result = super()._probe()
        if self.model is not None and result.model != self.model:
            return ProbeResult(backend=self.name, url=self.endpoint, up=False, model=self.model,
                               detail=f"model {self.model!r} is not served here; {result.detail}")
        return dataclasses.replace(result, grammar=self.capabilities.grammar)
