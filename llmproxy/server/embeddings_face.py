"""POST /v1/embeddings: OpenAI's embeddings API (llmproxy.faces.embeddings, llmproxy.embeddings), served
like a generation.

The request is read and checked against its route when it arrives (whether the model embeds, the
``dimensions`` it can give), then takes a place in its model's lane (llmproxy.server.admission: the same
queue as the model's generations) and is embedded there: on the event loop for an HTTP backend, in the
lane's threads for the embedded model, on a pool's least loaded member, which a failure hands to
another before anything was answered. The app's loop around it (llmproxy.server.app) gives it fallbacks,
the log line, metrics and the inspector, as every generation has.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from llmproxy.embeddings import check_route, options
from llmproxy.faces.embeddings import EmbeddingRequest, EmbeddingsResponse, embeddings_response, read_embedding_request
from llmproxy.route import Route
from llmproxy.server.disconnects import Watch
from llmproxy.server.endpoints import OpenAIFace, Served
from llmproxy.server.lanes import Lane
from llmproxy.server.request_log import RequestLog
from llmproxy.server.responses import admitted

EMBEDDINGS_PATH = "/v1/embeddings"
# The body as /docs shows it (read by llmproxy.faces.embeddings, which says what is wrong in detail).
EMBEDDINGS_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
                            {"type": "array", "items": {"type": "integer"}},
                            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}]},
        "model": {"type": "string"},
        "encoding_format": {"type": "string", "enum": ["float", "base64"]},
        "dimensions": {"type": "integer", "minimum": 1},
        "user": {"type": "string"},
    },
}


class EmbeddingsJob(OpenAIFace):
    """One embedding request on its route (the app's ``Generation``, with no stages: it never streams, and
    its answer is never unusable, so it gets no second chance)."""

    endpoint = "embeddings"
    stream = False
    heavy = False
    rerunnable = False  # the inspector runs chat requests again, not this

    def __init__(self, request: EmbeddingRequest, route: Route) -> None:
        check_route(request, route)
        self.request = request
        self.route = route

    @classmethod
    def read(cls, fields: dict[str, Any], served: Served) -> EmbeddingsJob:
        request = read_embedding_request(fields)
        return cls(request, served.models.route(request.model))

    def on_route(self, route: Route) -> EmbeddingsJob:
        return EmbeddingsJob(self.request, route)

    def retry(self, error: Exception) -> bool:
        return False


async def answer_embeddings(request: Request, lane: Lane, job: EmbeddingsJob, log: RequestLog) -> EmbeddingsResponse:
    """The embeddings, once the lane lets the request in; a pool member that fails hands it to another."""

    async def attempt(watch: Watch) -> EmbeddingsResponse:
        embedded = await lane.embed(job.request.inputs, options(job.request), watch, log)
        return embeddings_response(job.request, job.route.name, job.route.backend.name, embedded)

    return await admitted(request, lane, job, log, attempt)
