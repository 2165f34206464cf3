"""Schemathesis on the server's own OpenAPI document: every operation gets generated requests, valid
and invalid (wrong types, missing fields, other media types, odd paths), sent to a real server over
HTTP. None may get a 5xx, and every 4xx must be the endpoint's own error envelope (Anthropic's below
/v1/messages, else OpenAI's).

Deterministic (derandomized, a fixed seed, no example database) and sized for CI: about 1,000 cases
in ~15 s on 2 cores. bench/bench_fuzz.py runs the same checks for longer and counts what it finds.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from server_helpers import InstantBackend, endpoint_envelope_problem, route, running

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
    with running({"fake": route(InstantBackend(), wrapper="chatml-json")}) as running_server:
        yield running_server


@schema.parametrize()
def test_no_case_gets_a_5xx_and_every_4xx_is_an_envelope(case, server):
    response = case.call(base_url=server.base_url.removesuffix("/v1"), timeout=30)
    assert response.status_code < 500, f"{case.as_curl_command()}\n-> {response.status_code} {response.text}"
    if response.status_code >= 400:
        problem = endpoint_envelope_problem(case.operation.path, response.content)
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
