"""OpenAI's embeddings API (POST /v1/embeddings): MemGPT's and Letta's archival memory embed every
passage and query at it.

    request    ``input`` (a string, strings, token ids or lists of them) and the other fields, checked
    response   OpenAI's embedding list (floats or base64, usage) from what a backend gave

Pure translations: the pipeline (llmproxy.embeddings) asks the backend, and the server's endpoint
(llmproxy.server.embeddings_face) drives both.
"""

from llmproxy.faces.embeddings.request import MAX_INPUTS, EmbeddingRequest, read_embedding_request
from llmproxy.faces.embeddings.response import EmbeddingsResponse, cannot_shorten, embeddings_response, encoded

__all__ = ["MAX_INPUTS", "EmbeddingRequest", "EmbeddingsResponse", "cannot_shorten", "embeddings_response", "encoded",
           "read_embedding_request"]
