"""POST /v1/embeddings through llmproxy's server to each HTTP backend's embedding endpoint, asked with the
official openai SDK: fakes answer in each backend's own protocol (llama.cpp's OpenAI /v1/embeddings and
its native /embedding, Ollama's /api/embed and /api/embeddings, vLLM, LM Studio, text-generation-webui and
koboldcpp's /v1/embeddings), and record what llmproxy sent them. Batching, the older endpoints, the
backends' own refusals, a pool member that fails, and a model's fallbacks."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from llmproxy.backends import create_backend
from llmproxy.server.pools.spec import MemberSpec, PoolSpec

from server_helpers import RunningServer, route

from .conftest import Fake, dumps
from .fakes import FAKES, ProtocolFake


def vector(text: str) -> list[float]:
    """What every fake's model gives a text: easy to check, different for different texts."""
    return [float(len(text)), float(text.count("a")), 0.5]


def tokens(text: str) -> int:
    return len(text.split()) + 1


def openai_list(texts: list[str], model: str, **extra: Any) -> dict[str, Any]:
    data = [{"object": "embedding", "embedding": vector(text), "index": index} for index, text in enumerate(texts)]
    return {"object": "list", "data": data, "model": model, **extra}


def usage(texts: list[str]) -> dict[str, int]:
    count = sum(tokens(text) for text in texts)
    return {"prompt_tokens": count, "total_tokens": count}


@dataclass(frozen=True)
class Protocol:
    """One backend's embedding endpoint: its path, its answer to a body, whether it counts tokens."""

    path: str
    answer: Callable[[dict[str, Any]], dict[str, Any]]
    counts: bool = True


PROTOCOLS: dict[str, Protocol] = {
    # llama-server --embeddings: OpenAI's shape, with usage.
    "llamacpp": Protocol("/v1/embeddings", lambda body: {
        "model": "nomic-embed-text-v1.5.Q8_0.gguf", **openai_list(body["input"], "x"), "usage": usage(body["input"])}),
    # Ollama 0.3+: /api/embed, vectors under "embeddings", the prompt's tokens as prompt_eval_count.
    "ollama": Protocol("/api/embed", lambda body: {
        "model": body["model"], "embeddings": [vector(text) for text in body["input"]], "total_duration": 14143917,
        "load_duration": 1019500, "prompt_eval_count": usage(body["input"])["prompt_tokens"]}),
    "vllm": Protocol("/v1/embeddings", lambda body: {
        "id": "embd-5c1e", **openai_list(body["input"], body["model"]), "created": 1717000000,
        "usage": {**usage(body["input"]), "completion_tokens": 0, "prompt_tokens_details": None}}),
    "lmstudio": Protocol("/v1/embeddings", lambda body: {
        **openai_list(body["input"], "text-embedding-nomic-embed-text-v1.5"), "usage": usage(body["input"])}),
    # text-generation-webui: sentence-transformers, whatever model is named; it counts no tokens.
    "webui": Protocol("/v1/embeddings", lambda body: {
        **openai_list(body["input"], "all-mpnet-base-v2"), "usage": {"prompt_tokens": 0, "total_tokens": 0}},
        counts=False),
    "koboldcpp": Protocol("/v1/embeddings", lambda body: {
        **openai_list(body["input"], "koboldcpp/nomic-embed"), "usage": usage(body["input"])}),
}


def serve_embeddings(fake: Fake, path: str, answer: Callable[[dict[str, Any]], Any], status: int = 200) -> None:
    fake.route(path, lambda request: Response(dumps(answer(json.loads(request.get_data()))), status=status,
                                              content_type="application/json"))


@contextmanager
def proxy(routes: dict[str, Any], **options: Any) -> Iterator[tuple[openai.OpenAI, RunningServer]]:
    server = RunningServer(routes, **options)
    try:
        yield openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0), server
    finally:
        server.stop()


def served(fake: Fake, backend: str, **options: Any) -> tuple[ProtocolFake, Any]:
    """The backend's fake, discovery answered, and a route to a backend of its own (what one learns, such
    as an older server's endpoint, stays with it) named ``m``."""
    protocol_fake = FAKES[backend](fake)
    protocol_fake.serve_discovery()
    client = create_backend(backend, endpoint=fake.url, **protocol_fake.options, **options)
    client.discover()
    return protocol_fake, route(client, "m")


def unreachable(port: int, name: str) -> Any:
    return route(create_backend("llamacpp", endpoint=f"http://127.0.0.1:{port}"), name)


def embedding_bodies(fake: Fake, path: str) -> list[dict[str, Any]]:
    return [body for sent, body in zip(fake.paths, fake.bodies) if sent == path]


@pytest.mark.parametrize("backend", sorted(PROTOCOLS))
def test_the_sdk_embeds_through_each_backends_endpoint(fake, backend):
    protocol = PROTOCOLS[backend]
    protocol_fake, model = served(fake, backend)
    serve_embeddings(fake, protocol.path, protocol.answer)
    texts = ["alpha", "a banana and a pear"]
    with proxy({"m": model}) as (client, _):
        answer = client.embeddings.create(model="m", input=texts, encoding_format="float")
    assert [item.embedding for item in answer.data] == [vector(text) for text in texts]
    assert [item.index for item in answer.data] == [0, 1] and answer.model == "m"
    counted = sum(tokens(text) for text in texts)
    assert (answer.usage.prompt_tokens == counted) is protocol.counts and answer.usage.prompt_tokens > 0
    [sent] = embedding_bodies(fake, protocol.path)
    assert sent["input"] == texts  # every input in one request: the endpoint takes batches
    if backend == "ollama":
        assert sent == {"model": protocol_fake.model, "input": texts, "truncate": False}
    else:
        assert sent["encoding_format"] == "float" and "dimensions" not in sent
    if backend == "koboldcpp":
        assert sent["truncate"] is False  # an input over its context must not be cut silently


def test_the_sdks_default_base64_decodes_to_the_backends_floats(fake):
    protocol = PROTOCOLS["llamacpp"]
    _, model = served(fake, "llamacpp")
    serve_embeddings(fake, protocol.path, protocol.answer)
    with proxy({"m": model}) as (client, server):
        answer = client.embeddings.create(model="m", input="alpha")  # the SDK asks for base64
        raw = httpx.post(server.base_url + "/embeddings", json={"input": "alpha", "encoding_format": "base64"}).json()
    assert answer.data[0].embedding == vector("alpha")
    assert struct.unpack("<3f", base64.b64decode(raw["data"][0]["embedding"])) == tuple(vector("alpha"))


def test_a_large_request_goes_in_batches_in_order(fake):
    protocol = PROTOCOLS["vllm"]
    _, model = served(fake, "vllm")
    serve_embeddings(fake, protocol.path, protocol.answer)
    texts = [f"passage {index} " + "a" * (index % 7) for index in range(300)]
    with proxy({"m": model}) as (client, _):
        answer = client.embeddings.create(model="m", input=texts, encoding_format="float")
    assert [item.embedding for item in answer.data] == [vector(text) for text in texts]
    assert [len(body["input"]) for body in embedding_bodies(fake, protocol.path)] == [256, 44]
    assert answer.usage.prompt_tokens == sum(tokens(text) for text in texts)


def test_token_ids_go_to_a_backend_that_takes_them_and_are_refused_by_one_that_does_not(fake):
    protocol = PROTOCOLS["vllm"]
    _, model = served(fake, "vllm")
    serve_embeddings(fake, protocol.path, lambda body: {**openai_list(["ids"], "m"), "usage": usage(["ids"])})
    with proxy({"m": model}) as (client, _):
        client.embeddings.create(model="m", input=[[1, 2, 3]], encoding_format="float")
    assert embedding_bodies(fake, protocol.path)[0]["input"] == [[1, 2, 3]]
    other = Fake(fake.server)
    _, ollama = served(other, "ollama")
    with proxy({"m": ollama}) as (client, _):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="m", input=[1, 2, 3], encoding_format="float")
    assert "embeds text only" in refused.value.body["message"] and refused.value.body["param"] == "input"


def test_dimensions_go_to_vllm_and_its_refusal_is_the_clients_400(fake):
    _, model = served(fake, "vllm")
    refusal = {"object": "error", "message": 'Model "m" does not support matryoshka representation, changing output '
               "dimensions will lead to poor results.", "type": "BadRequestError", "param": None, "code": 400}
    serve_embeddings(fake, "/v1/embeddings", lambda body: refusal, status=400)
    with proxy({"m": model}) as (client, _):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="m", input="alpha", dimensions=2, encoding_format="float")
    assert embedding_bodies(fake, "/v1/embeddings")[0]["dimensions"] == 2
    assert "matryoshka" in refused.value.body["message"]


def test_dimensions_a_backend_ignored_are_a_400_saying_the_length(fake):
    protocol = PROTOCOLS["ollama"]  # an Ollama older than the field answers whole vectors
    _, ollama = served(fake, "ollama")
    serve_embeddings(fake, protocol.path, protocol.answer)
    with proxy({"m": ollama}) as (client, _):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="m", input="alpha", dimensions=2, encoding_format="float")
    assert embedding_bodies(fake, protocol.path)[0]["dimensions"] == 2
    assert refused.value.body["param"] == "dimensions"
    assert "gives 3-dimensional embeddings" in refused.value.body["message"]


def test_dimensions_a_backend_cannot_give_are_refused_before_it_is_asked_once_its_length_is_known(fake):
    protocol = PROTOCOLS["lmstudio"]  # its endpoint takes no dimensions
    _, lmstudio = served(fake, "lmstudio")
    serve_embeddings(fake, protocol.path, protocol.answer)
    with proxy({"m": lmstudio}) as (client, server):
        client.embeddings.create(model="m", input="alpha", encoding_format="float")
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="m", input="beta", dimensions=2, encoding_format="float")
        card = client.models.retrieve("m").model_extra
    assert len(embedding_bodies(fake, protocol.path)) == 1
    assert "cannot shorten them to 2" in refused.value.body["message"]
    assert card["llmproxy"]["capabilities"] == {"tools": True, "grammar": False, "embeddings": True,
                                                "embedding_dimensions": 3}
    assert card["context_length"] == card["max_model_len"] == 4096  # LM Studio's /api/v0/models says so


@pytest.mark.parametrize("native", [
    lambda body: [{"index": 0, "embedding": [vector(body["content"])]}],  # since December 2024
    lambda body: {"embedding": vector(body["content"])},  # before
], ids=["current", "2024"])
def test_a_llamacpp_server_without_the_openai_endpoint_is_asked_at_embedding(fake, native):
    _, model = served(fake, "llamacpp")
    fake.raw("/v1/embeddings", b"File Not Found", status=404, content_type="text/plain")
    serve_embeddings(fake, "/embedding", native)
    with proxy({"m": model}) as (client, _):
        answer = client.embeddings.create(model="m", input=["alpha", "beta"], encoding_format="float")
    assert [item.embedding for item in answer.data] == [vector("alpha"), vector("beta")]
    assert embedding_bodies(fake, "/embedding") == [{"content": "alpha"}, {"content": "beta"}]
    assert answer.usage.prompt_tokens > 0  # estimated: the old endpoint counts none


def test_an_ollama_older_than_api_embed_is_asked_at_api_embeddings(fake):
    protocol_fake, model = served(fake, "ollama")
    fake.raw("/api/embed", b"404 page not found", status=404, content_type="text/plain")
    serve_embeddings(fake, "/api/embeddings", lambda body: {"embedding": vector(body["prompt"])})
    with proxy({"m": model}) as (client, _):
        answer = client.embeddings.create(model="m", input=["alpha", "beta"], encoding_format="float")
    assert [item.embedding for item in answer.data] == [vector("alpha"), vector("beta")]
    assert embedding_bodies(fake, "/api/embeddings") == [{"model": protocol_fake.model, "prompt": "alpha"},
                                                         {"model": protocol_fake.model, "prompt": "beta"}]


EMPTY_VECTOR = {**openai_list([], "koboldcpp/nomic-embed"), "usage": {"prompt_tokens": 0, "total_tokens": 0},
                "data": [{"object": "embedding", "index": 0, "embedding": []}]}


@pytest.mark.parametrize(("backend", "path", "reply", "status", "answered", "words"), [
    # A model Ollama lacks stays the backend's error, not the client's.
    ("ollama", "/api/embed", {"error": 'model "nomic-embed-text" not found, try pulling it first'}, 404, 502,
     "try pulling it"),
    # An input too long (truncate is off) is the client's 400, in Ollama's words.
    ("ollama", "/api/embed", {"error": "the input length exceeds the context length"}, 400, 400,
     "exceeds the context length"),
    # koboldcpp answers an input over its embedding context with an empty vector: an error, never an embedding.
    ("koboldcpp", "/v1/embeddings", EMPTY_VECTOR, 200, 502, "within its context"),
], ids=["ollama-model-missing", "ollama-input-too-long", "koboldcpp-empty-vector"])
def test_a_backends_refusal_is_answered_in_openais_envelope(fake, backend, path, reply, status, answered, words):
    _, model = served(fake, backend)
    serve_embeddings(fake, path, lambda body: reply, status=status)
    with proxy({"m": model}) as (client, _):
        with pytest.raises(openai.APIStatusError) as failed:
            client.embeddings.create(model="m", input="alpha", encoding_format="float")
    assert failed.value.status_code == answered and words in failed.value.body["message"]


def test_a_backend_without_an_embedding_endpoint_is_a_400_naming_those_with_one(fake):
    _, model = served(fake, "webui-legacy")
    with proxy({"m": model}) as (client, _):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="m", input="alpha", encoding_format="float")
    message = refused.value.body["message"]
    assert "has no embedding endpoint" in message and "ollama" in message and "embedded" in message


def test_a_pool_member_that_fails_hands_the_embedding_to_another(fake):
    protocol = PROTOCOLS["llamacpp"]
    _, up = served(fake, "llamacpp")
    serve_embeddings(fake, protocol.path, protocol.answer)
    failing_server = HTTPServer()
    failing_server.start()
    try:
        failing = Fake(failing_server)
        _, broken = served(failing, "llamacpp")
        failing.json(protocol.path, {"error": {"code": 500, "message": "embedding failed", "type": "server_error"}},
                     status=500)
        for server in (fake, failing):  # the load each reports, which the pool reads
            server.json("/slots", [{"id": 0, "is_processing": False}], method="GET")
        # Idle members tie, and a tie goes to the larger: the failing one is asked first.
        pool = PoolSpec((MemberSpec("broken", broken, weight=2), MemberSpec("up", up)))
        with proxy({"m": up}, pools={"m": pool}) as (client, server):
            answers = [client.embeddings.create(model="m", input=f"text {i}", encoding_format="float")
                       for i in range(3)]
            metrics = httpx.get(server.base_url.removesuffix("/v1") + "/metrics").text
    finally:
        failing_server.stop()
    assert [item.data[0].embedding for item in answers] == [vector(f"text {i}") for i in range(3)]
    assert len(embedding_bodies(failing, protocol.path)) == 1  # then it was out, cooling down
    assert 'llmproxy_requests_total{endpoint="embeddings",model="m",status="200"} 3.0' in metrics
    assert 'llmproxy_member_failures_total{member="broken",model="m"} 1.0' in metrics


def test_a_model_that_is_down_falls_back_for_embeddings(fake, closed_port):
    protocol = PROTOCOLS["vllm"]
    _, up = served(fake, "vllm")
    serve_embeddings(fake, protocol.path, protocol.answer)
    down = unreachable(closed_port, "primary")
    with proxy({"primary": down, "m": up}, fallbacks={"primary": ["m"]}) as (_, server):
        response = httpx.post(server.base_url + "/embeddings", json={"model": "primary", "input": "alpha"})
    assert response.status_code == 200 and response.json()["data"][0]["embedding"] == vector("alpha")
    assert response.headers["x-llmproxy-fallbacks"] == "primary=backend_unreachable"
    assert response.json()["llmproxy"]["fallbacks"] == [{"model": "primary", "error": "backend_unreachable"}]


def test_a_backend_slower_than_its_timeout_is_a_504(fake):
    _, slow = served(fake, "vllm", first_token_timeout=0.3)
    fake.slow("/v1/embeddings", 1.5)
    with proxy({"m": slow}) as (client, _):
        with pytest.raises(openai.APIStatusError) as failed:
            client.embeddings.create(model="m", input="alpha", encoding_format="float")
    assert failed.value.status_code == 504 and "first_token_timeout" in failed.value.body["message"]

