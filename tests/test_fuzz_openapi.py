"""Schemathesis on the server's own OpenAPI document: every operation of every face (chat and text
completions, the Responses API, the Messages API and its token count, the models, a stored response)
gets generated requests, valid and invalid (wrong types, missing fields, other media types, odd paths,
streamed or not), sent to a real server over HTTP. None may get a 5xx, every 4xx must be the endpoint's
own error envelope (Anthropic's below /v1/messages, else OpenAI's), and every 2xx a sound answer: a
stream well-formed in its face's framing, never ending in an error of the server's own
(tests/fuzz_answers.py).

Deterministic (derandomized, a fixed seed, no example database) and sized for CI: about 1,000 cases
in ~15 s on 2 cores. bench/bench_fuzz.py runs the same checks for longer and counts what it finds.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from fuzz_answers import answer_problem
from fuzz_endpoints import endpoint_at
from server_helpers import InstantBackend, route, running

from llmproxy.server.app import create_app

CONFIG = schemathesis.Config.from_dict({
    "seed": 13,
    "suppress-health-check": ["too_slow", "data_too_large", "large_base_example"],
    "generation": {"mode": "all", "max-examples": 100, "deterministic": True, "database": "none"},
})
# The document /openapi.json serves; it does not depend on the routes behind it.
schema = schemathesis.openapi.from_dict(create_app({"fake": route(InstantBackend())}).openapi(), config=CONFIG)


@pytest.fixture(scope="module")
def server():
    # Any model name is answered, so that requests with generated names reach the pipeline too.
    with running({"fake": route(InstantBackend(), wrapper="chatml-json")}, default_model="fake") as running_server:
        yield running_server


@schema.parametrize()
def test_no_case_gets_a_5xx_and_every_answer_is_sound(case, server):
    response = case.call(base_url=server.base_url.removesuffix("/v1"), timeout=30)
    content_type = (response.headers.get("content-type") or [""])[0]  # schemathesis lists a header's values
    problem = answer_problem(endpoint_at(case.operation.path), response.status_code, content_type, response.content)
    assert problem is None, f"{case.as_curl_command()}\n-> {response.status_code}: {problem}"


def test_the_served_document_is_the_one_fuzzed(server):
    """/openapi.json is what was fuzzed, and its generation endpoints take the real request models
    (an empty body schema would let the fuzzing above pass without reaching them)."""
    served = httpx.get(server.base_url.removesuffix("/v1") + "/openapi.json", timeout=10).json()
    assert served == schema.raw_schema
    for path, model in [("/v1/chat/completions", "ChatRequest"), ("/v1/completions", "CompletionRequest")]:
        body = served["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
        assert served["components"]["schemas"][model]["properties"]
    for path, field in [("/v1/responses", "input"), ("/v1/messages", "messages"), ("/v1/messages/count_tokens", "messages")]:
        body = served["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert field in body["required"] and field in body["properties"]
