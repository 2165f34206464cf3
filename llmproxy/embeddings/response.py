"""The answer to an embedding request, in OpenAI's shape: a list of ``embedding`` objects in input order,
each vector as floats or as base64 (little-endian float32, as OpenAI's SDKs decode it), and ``usage``.

``llmproxy`` says which backend answered and, on a server, the models tried first (fallbacks).
"""

from __future__ import annotations

import base64
import struct
from typing import Literal

from pydantic import BaseModel, Field

from llmproxy.types import Fallback


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingInfo(BaseModel):
    """How llmproxy made the embeddings."""

    backend: str
    dimensions: int
    estimated_usage: bool = False  # the backend counted no tokens: ``usage`` is tiktoken's estimate
    fallbacks: list[Fallback] = Field(default_factory=list)
    # Set by the server's loop for every answer; an embedding is never escalated, so it is left out.
    escalated_from: Fallback | None = Field(default=None, exclude=True)


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    llmproxy: EmbeddingInfo | None = None


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """``vector`` as the request asked for it."""
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector
