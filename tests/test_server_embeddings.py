"""POST /v1/embeddings on the server's default model, the embedded backend (SmolLM2-135M in embedding
mode, mean pooling), through the official openai SDK: vectors as floats and as the SDK's default base64,
a small retrieval check, hostile inputs answered with a 4xx in under a second, the facts /v1/models
gives, the log line, metrics and the inspector, and a streamed chat on the same server unaffected."""

from __future__ import annotations

import logging
import math
import time

import httpx
import pytest
from openai import OpenAI
from server_helpers import envelope_problem, running

from llmproxy.route import build_route

pytestmark = pytest.mark.model  # every test here runs the embedded model behind a real server

WIDTH = 576  # SmolLM2-135M's hidden size
# Facts an agent keeps in its archival memory, and a question about each.
PASSAGES = ["I am allergic to peanuts.",
            "My sister lives in Lisbon and works as a nurse.",
            "Our dog Rex loves chasing tennis balls in the park.",
            "The meeting with the bank was moved to Thursday morning.",
            "My favourite food is spicy Thai green curry.",
            "I am learning to play the violin on weekends.",
            "The car needs new winter tyres before December.",
            "Grandma's birthday party is on the fifth of May."]
QUESTIONS = ["What food am I allergic to?",
             "Where does my sister live?",
             "What does the dog Rex like to chase?",
             "When is the meeting with the bank?",
             "What is my favourite food?",
             "Which instrument am I learning to play?",
             "What does the car need before winter?",
             "When is grandma's birthday party?"]


@pytest.fixture(scope="module")
def server():
    with running({"embedded": build_route(name="embedded")}, default_model="embedded", capture=True) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)


def cosine(one: list[float], other: list[float]) -> float:
    return sum(a * b for a, b in zip(one, other)) / math.sqrt(sum(a * a for a in one) * sum(b * b for b in other))


def test_the_sdk_embeds_with_the_default_model_as_floats_and_as_base64(client):
    texts = ["The cat sat on the mat.", "Stock markets fell on Monday."]
    floats = client.embeddings.create(model="text-embedding-ada-002", input=texts, encoding_format="float")
    packed = client.embeddings.create(model="text-embedding-ada-002", input=texts)  # the SDK asks for base64
    assert floats.model == "text-embedding-ada-002" and [item.index for item in floats.data] == [0, 1]
    assert [len(item.embedding) for item in floats.data] == [WIDTH, WIDTH]
    for one, other in zip(floats.data, packed.data):
        assert max(abs(a - b) for a, b in zip(one.embedding, other.embedding)) < 1e-6  # float32 in base64
        assert abs(math.sqrt(sum(v * v for v in one.embedding)) - 1) < 1e-6  # unit length, as OpenAI's
    assert 0 < cosine(floats.data[0].embedding, floats.data[1].embedding) < 0.999
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 8
    assert floats.model_extra["llmproxy"]["backend"] == "embedded"
    # Token ids embed as the text they spell does.
    ids = client.embeddings.create(model="m", input=[[504, 2362, 3337]], encoding_format="float")
    assert len(ids.data[0].embedding) == WIDTH and ids.usage.prompt_tokens == 3


def test_the_default_model_finds_the_passage_a_question_is_about(client):
    """Recall@1: for each question, is its own passage the most similar of the eight?"""
    vectors = [item.embedding for item in
               client.embeddings.create(model="m", input=PASSAGES + QUESTIONS, encoding_format="float").data]
    passages, questions = vectors[:len(PASSAGES)], vectors[len(PASSAGES):]
    best = [max(range(len(passages)), key=lambda index: cosine(question, passages[index])) for question in questions]
    recall = sum(found == wanted for wanted, found in enumerate(best)) / len(QUESTIONS)
    print(f"recall@1 of the default embedding model: {recall:.3f} ({len(QUESTIONS)} questions)")
    assert best[0] == 0  # the peanut allergy MemGPT's archival memory keeps
    assert recall >= 0.5  # chance is 1/8


HOSTILE = [
    {},
    {"input": ""},
    {"input": []},
    {"input": ["a"] * 10_000},
    {"input": ["word " * 400] * 2_000 + [""]},  # the last is empty: refused before any is embedded
    {"input": [[["nested"]]]},
    {"input": [[1, [2]]]},
    {"input": {"text": "a"}},
    {"input": 12},
    {"input": [True, False]},
    {"input": ["a", 1]},
    {"input": [10**9]},  # not in the vocabulary
    {"input": "x" * 200_000},  # more bytes than 2048 tokens can hold: refused untokenized
    {"input": "word " * 3_000},  # 3,000 tokens
    {"input": "a", "dimensions": 64},
    {"input": "a", "dimensions": -1},
    {"input": "a", "encoding_format": "int8"},
    {"input": "a", "model": ["m"]},
    {"input": "a", "stream": True},
]


def test_hostile_inputs_are_a_4xx_in_openais_envelope_within_a_second(server):
    slowest = 0.0
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        http.post("/embeddings", json={"input": "warm"})  # the model loaded: its first load is not an answer's time
        for body in HOSTILE:
            started = time.perf_counter()
            response = http.post("/embeddings", json=body)
            seconds = time.perf_counter() - started
            slowest = max(slowest, seconds)
            assert 400 <= response.status_code < 500, (body if len(str(body)) < 200 else str(body)[:200], response.text)
            assert envelope_problem(response.content) is None
            assert seconds < 1.0, (str(body)[:100], seconds)
        big = http.post("/embeddings", content=b'{"input": "' + b"a" * 9_000_000 + b'"}',
                        headers={"content-type": "application/json"})
    assert big.status_code == 413
    print(f"slowest hostile embedding request: {slowest * 1000:.0f} ms")


def test_models_says_what_the_model_takes_and_its_context(server, client):
    card = client.models.retrieve("embedded").model_extra
    assert card["context_length"] == card["max_model_len"] == 8192
    assert card["llmproxy"]["capabilities"] == {"tools": True, "grammar": True, "embeddings": True,
                                                "embedding_dimensions": WIDTH}
    listed = httpx.get(server.base_url + "/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert listed["data"][0]["max_input_tokens"] == 8192


def test_an_embedding_is_logged_counted_and_shown_in_the_inspector(server, client, caplog):
    with caplog.at_level(logging.INFO, logger="llmproxy.server"):
        client.embeddings.create(model="embedded", input=["one", "two"], encoding_format="float")
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embeddings ")]
    assert "model=embedded backend=embedded" in line and "status=200" in line
    root = server.base_url.removesuffix("/v1")
    metrics = httpx.get(root + "/metrics").text
    assert 'llmproxy_requests_total{endpoint="embeddings",model="embedded",status="200"}' in metrics
    latest = httpx.get(root + "/inspect/api/requests").json()[-1]
    shown = httpx.get(root + f"/inspect/api/requests/{latest['seq']}").json()
    assert shown["endpoint"] == "embeddings" and '"two"' in shown["steps"]["request"]
    assert shown["can_rerun"] is False and '"embedding"' in shown["steps"]["response"]


def test_a_streamed_chat_on_the_same_server_is_unaffected(client):
    client.embeddings.create(model="embedded", input="before the chat", encoding_format="float")
    chunks = list(client.chat.completions.create(
        model="embedded", messages=[{"role": "user", "content": "Say hello."}], stream=True, max_tokens=8,
        temperature=0, seed=1))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.strip() and chunks[-1].choices[0].finish_reason in ("stop", "length")
    after = client.embeddings.create(model="embedded", input="after the chat", encoding_format="float")
    assert len(after.data[0].embedding) == WIDTH
