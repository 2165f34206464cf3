"""The answer to an embedding request, in OpenAI's shape: a list of ``embedding`` objects in input order,
each vector as floats or as base64 (little-endian float32, as OpenAI's SDKs decode it), and ``usage``
(the backend's count, else tiktoken's estimate).

``llmproxy`` says which backend answered and, on a server, the models tried first (fallbacks).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from llmproxy.backends.base import Embedded, EmbeddingInput
from llmproxy.errors import InvalidRequestError
from llmproxy.faces.embeddings.request import EmbeddingRequest
from llmproxy.tokens import estimate_tokens
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


def embeddings_response(request: EmbeddingRequest, model: str, backend: str, embedded: Embedded) -> EmbeddingsResponse:
    """The response to ``request`` from the embeddings ``backend`` gave for the served ``model``."""
    length = len(embedded.vectors[0])
    if request.dimensions is not None and length != request.dimensions:  # a server that ignored the field
        raise cannot_shorten(model, length, request.dimensions)
    tokens = embedded.prompt_tokens
    estimated = tokens is None
    if tokens is None:
        tokens = _estimated_tokens(request.inputs)
    data = [Embedding(index=index, embedding=encoded(vector, request.encoding_format))
            for index, vector in enumerate(embedded.vectors)]
    return EmbeddingsResponse(data=data, model=request.model or model,
                              usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
                              llmproxy=EmbeddingInfo(backend=backend, dimensions=length, estimated_usage=estimated))


def cannot_shorten(model: str, length: int, asked: int) -> InvalidRequestError:
    return InvalidRequestError(f"dimensions: the model {model!r} gives {length}-dimensional embeddings and cannot "
                               f"shorten them to {asked}; leave dimensions out (or send {length})", param="dimensions")


def _estimated_tokens(inputs: Sequence[EmbeddingInput]) -> int:
    return sum(estimate_tokens(item) if isinstance(item, str) else len(item) for item in inputs)
