"""Embeddings from a real OpenAI-compatible server through llmproxy: llama-cpp-python's own server started
with ``--embedding true`` on the SmolLM2-135M GGUF, served as a ``vllm`` model (any OpenAI-compatible
server), asked with the official openai SDK. Its server pools nothing for a generation model (one vector
per token), which llmproxy averages: the same mean pooling as the embedded backend's, on the same GGUF."""

from __future__ import annotations

import math

import pytest
from openai import OpenAI
from server_helpers import route, running

from llmproxy.backends.base import EmbeddingOptions
from llmproxy.backends.embedded import EmbeddedBackend
from llmproxy.backends.vllm import VLLMBackend

from .real_servers import llama_cpp_server

pytestmark = pytest.mark.model  # the server runs the real model

TEXT = "I am allergic to peanuts."


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    with llama_cpp_server(tmp_path_factory.mktemp("llama_embedding_server"), "--embedding", "true",
                          "--n_ctx", "512") as url:
        yield url


def cosine(one: list[float], other: list[float]) -> float:
    return sum(a * b for a, b in zip(one, other)) / math.sqrt(sum(a * a for a in one) * sum(b * b for b in other))


def test_the_sdk_embeds_through_llmproxy_at_llama_cpp_pythons_server(embedding_server):
    backend = VLLMBackend(embedding_server, read_timeout=120)
    with running({"m": route(backend, "m")}) as proxy:
        client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0, timeout=300)
        answer = client.embeddings.create(model="m", input=[TEXT], encoding_format="float")
    served = answer.data[0].embedding
    assert len(served) == 576 and answer.usage.prompt_tokens == 6  # its tokens, as the server counted them
    assert answer.model_extra["llmproxy"]["estimated_usage"] is False
    # Averaged here from the server's per-token vectors, it points where the embedded backend's mean does.
    [embedded] = EmbeddedBackend().embed([TEXT], EmbeddingOptions()).vectors
    assert cosine(served, embedded) > 0.999
