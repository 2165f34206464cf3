"""Embedding a request on a route, as ``proxy`` is for a chat: what only the route's backend can answer
(whether it embeds, whether it gives the ``dimensions`` asked), the backend's call, and the response
(llmproxy.faces.embeddings). ``get_embeddings`` is the library's entry.

``embed`` is the whole of it, in this thread; the server runs the same steps around its lanes
(llmproxy.server.embeddings_face): ``check_route`` when a request is read, the backend's call on the
model's lane, then ``embeddings_response``.
"""

from __future__ import annotations

from typing import Any

from llmproxy.backends.base import EmbeddingOptions, no_embeddings
from llmproxy.faces.embeddings import (EmbeddingRequest, EmbeddingsResponse, cannot_shorten, embeddings_response,
                                       read_embedding_request)
from llmproxy.route import Route, build_route


def options(request: EmbeddingRequest) -> EmbeddingOptions:
    return EmbeddingOptions(dimensions=request.dimensions)


def check_route(request: EmbeddingRequest, route: Route) -> None:
    """Refuse, before any backend is asked, what the route's backend cannot give: embeddings at all, or
    the ``dimensions`` asked where its model's length is known and its endpoint cannot shorten vectors."""
    backend = route.backend
    if not backend.capabilities.embeddings:
        raise no_embeddings(backend.name)
    known = backend.embedding_dimensions()
    if request.dimensions is not None and known is not None and request.dimensions != known \
            and not getattr(backend, "embedding_dimensions_field", False):
        raise cannot_shorten(route.name, known, request.dimensions)


def embed(request: EmbeddingRequest, route: Route) -> EmbeddingsResponse:
    """``request`` embedded by ``route``'s backend, in this thread."""
    check_route(request, route)
    embedded = route.backend.embed(request.inputs, options(request))
    return embeddings_response(request, route.name, route.backend.name, embedded)


def get_embeddings(input: Any, *, model: str | None = None,  # noqa: A002 - ``input``: OpenAI's name
                   endpoint_type: str = "embedded", endpoint: str | None = None, encoding_format: str = "float",
                   dimensions: int | None = None, auth_type: str | None = None, auth_key: str | None = None,
                   backend_options: dict[str, Any] | None = None) -> EmbeddingsResponse:
    """Embed ``input`` (a string, a list of strings, token ids or lists of them, as OpenAI's API takes it)
    with a local model: by default the embedded backend's bundled model (``model``: a GGUF path there;
    the served model's name on a server backend). ``endpoint_type``, ``endpoint``, ``auth_*`` and
    ``backend_options`` are ``get_chat_completion``'s. Returns OpenAI's embedding list."""
    fields: dict[str, Any] = {"input": input, "encoding_format": encoding_format}
    if dimensions is not None:
        fields["dimensions"] = dimensions
    request = read_embedding_request(fields)
    route = build_route(endpoint_type=endpoint_type, endpoint=endpoint, model=model, auth_type=auth_type,
                        auth_key=auth_key, backend_options=backend_options)
    return embed(request, route)
