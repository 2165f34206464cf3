"""The embedding stage: an OpenAI embedding request -> its route's backend -> OpenAI's embedding list.

    request.py    ``input`` and the other fields read and checked (EmbeddingRequest)
    embed.py      what the route's backend can give, its call, the response; ``get_embeddings`` (library)
    response.py   the response: vectors as floats or base64, usage

A backend embeds with ``Backend.embed`` (llmproxy.backends: each backend's own endpoint, in batches where
it takes them); the server's endpoint (llmproxy.server.embeddings_face) runs these steps on its lanes.
"""

from llmproxy.embeddings.embed import check_route, embed, embeddings_response, get_embeddings, options
from llmproxy.embeddings.request import MAX_INPUTS, EmbeddingRequest, read_embedding_request
from llmproxy.embeddings.response import EmbeddingsResponse

__all__ = ["MAX_INPUTS", "EmbeddingRequest", "EmbeddingsResponse", "check_route", "embed", "embeddings_response",
           "get_embeddings", "options", "read_embedding_request"]
