"""``llmproxy bfcl`` end to end against a fake OpenAI-compatible server with known answers, and against
an llmproxy route (on a fake llama.cpp) served for the run: the table, the JSON-lines record, what was
sent, and the one-line errors."""

from __future__ import annotations

import json

import pytest
from bfcl_helpers import MODEL, SAMPLE, FakeOpenAI, chat_completion, right_calls, user_text
from cli_helpers import invoke
from server_helpers import FakeLlamaCpp

from llmproxy.evaluation.bfcl import load_cases
from llmproxy.evaluation.bfcl import data as bfcl_data

CATEGORIES = ("simple_python", "irrelevance", "live_simple")
CASES = {user_text(case.messages): case for case in load_cases(list(CATEGORIES), SAMPLE)}
BY_CATEGORY = {category: [case for case in CASES.values() if case.category == category] for category in CATEGORIES}
LEAK = "Your last answer could not be used: the arguments were wrong."


def _with_wrong_value(calls):
    (name, arguments), = calls
    param, value = next((param, value) for param, value in arguments.items() if type(value) in (int, str))
    return [(name, {**arguments, param: value + 1 if type(value) is int else value + " and more"})]


def _with_leak(calls):
    (name, arguments), = calls
    return [(name, {**arguments, next(iter(arguments)): LEAK})]


# The answer to each case, and the kind its verdict must have (None: right).
PLAN = {
    BY_CATEGORY["simple_python"][0].id: (lambda case: (200, chat_completion(right_calls(case))), None),
    BY_CATEGORY["simple_python"][1].id: (lambda case: (200, chat_completion(_with_wrong_value(right_calls(case)))),
                                         "wrong_value"),
    BY_CATEGORY["simple_python"][2].id: (lambda case: (200, chat_completion(text="It is 42.")), "text"),
    BY_CATEGORY["irrelevance"][0].id: (lambda case: (200, chat_completion(text="No function fits.")), None),
    BY_CATEGORY["irrelevance"][1].id: (lambda case: (200, chat_completion(
        [(case.functions[0]["name"].replace(".", "_"), {})])), "needless_call"),
    BY_CATEGORY["irrelevance"][2].id: (lambda case: (200, chat_completion(text="")), None),
    BY_CATEGORY["live_simple"][0].id: (lambda case: (200, chat_completion(right_calls(case))), None),
    BY_CATEGORY["live_simple"][1].id: (lambda case: (500, {"error": {"message": "the backend fell over", "type":
                                                                       "server_error", "param": None, "code": None}}),
                                       "error"),
    BY_CATEGORY["live_simple"][2].id: (lambda case: (200, chat_completion(_with_leak(right_calls(case)))),
                                       "leaked_text"),
}


def planned(question: str, body: dict):
    case = CASES[question]
    return PLAN[case.id][0](case)


def table_rows(stdout: str) -> dict[tuple[str, str], dict[str, str]]:
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]
    return {(row["category"], row["target"]): row for row in rows}


def test_a_run_against_a_server_prints_the_table_and_records_every_case(httpserver, tmp_path):
    fake = FakeOpenAI(httpserver, planned)
    output = tmp_path / "run.jsonl"
    args = ["bfcl", "--base-url", fake.base_url, "--data", str(SAMPLE), "--output", str(output),
            *(arg for category in CATEGORIES for arg in ("--category", category))]
    result = invoke(*args, env={"LLMPROXY_BFCL_API_KEY": "sk-test"})
    assert result.exit_code == 0, result.stderr

    rows = table_rows(result.stdout)
    target = fake.base_url
    assert {key[0] for key in rows} == set(CATEGORIES)
    simple, irrelevance, live = (rows[(category, target)] for category in CATEGORIES)
    assert (simple["correct"], simple["%"], simple["wrong value"], simple["text"]) == ("1/3", "33.3", "1", "1")
    assert (irrelevance["correct"], irrelevance["needless call"]) == ("2/3", "1")
    assert (live["correct"], live["error"], live["leaked text"]) == ("1/3", "1", "1")
    assert all(row["face"] == "chat" and float(row["mean s"]) >= 0 for row in rows.values())
    assert "9 BFCL cases" in result.stdout

    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 9 and {record["id"] for record in records} == set(PLAN)
    for record in records:
        kind = PLAN[record["id"]][1]
        assert (record["correct"], record["kind"]) == (kind is None, kind), record
        assert (record["target"], record["face"], record["request"]["model"]) == (target, "chat", MODEL)
        assert record["request"]["path"] == "/chat/completions" and record["request"]["messages"] >= 1
        assert record["seconds"] >= 0 and record["status"] in (200, 500)
    error = next(record for record in records if record["kind"] == "error")
    assert "HTTP 500: the backend fell over" in error["error"]
    assert error["bfcl_error_type"] == "ast_decoder:decoder_failed"
    wrong = next(record for record in records if record["kind"] == "wrong_value")
    assert wrong["bfcl_error_type"] == "value_error:others" and wrong["calls"][0]["arguments"]

    # Sent as BFCL sends: no tool_choice, no max_tokens, temperature 0.001, the key as a bearer token.
    assert len(fake.bodies) == 9
    for body in fake.bodies:
        assert body["temperature"] == 0.001 and body["model"] == MODEL and body["store"] is False
        assert "tool_choice" not in body and "max_tokens" not in body and body["tools"]
    assert all(headers["Authorization"] == "Bearer sk-test" for headers in fake.headers)


def test_a_server_and_an_llmproxy_route_side_by_side(httpserver, tmp_path):
    case = load_cases(["simple_python"], SAMPLE, limit=1, seed=0)[0]
    (name, arguments), = right_calls(case)
    fake = FakeOpenAI(httpserver, lambda question, body: (200, chat_completion(text="No idea.")))
    # The route's backend (a fake llama.cpp server on the same port) writes the right call, in the json syntax.
    llama = FakeLlamaCpp(httpserver)
    llama.script = json.dumps({"name": name, "arguments": arguments})
    result = invoke("bfcl", "--base-url", fake.base_url, "--backend", "llamacpp", "--endpoint", llama.url,
                    "--wrapper", "chatml-json", "--data", str(SAMPLE), "--category", "simple_python", "--limit", "1")
    assert result.exit_code == 0, result.stderr
    rows = table_rows(result.stdout)
    route = next(target for category, target in rows if target.startswith("llmproxy"))
    assert "chatml-json" in route
    assert rows[("simple_python", fake.base_url)]["correct"] == "0/1"
    assert rows[("simple_python", route)]["correct"] == "1/1"
    assert len(llama.bodies) == 1  # the case went through llmproxy's own server to the backend


@pytest.mark.parametrize(("args", "message"), [
    (["--category", "simple"], "unknown BFCL category 'simple': use one of simple_python"),
    (["--face", "grpc"], "unknown face 'grpc': use one of chat, responses, messages"),
    (["--base-url", "http://127.0.0.1:9/v1"], "cannot reach http://127.0.0.1:9/v1"),
    (["--base-url", "localhost:8080/v1"], "base URL 'localhost:8080/v1' needs its scheme"),
    (["--output", "/nonexistent/run.jsonl"], "cannot write /nonexistent/run.jsonl"),
])
def test_bad_input_is_one_line_saying_what_to_do(args, message):
    result = invoke("bfcl", "--data", str(SAMPLE), "--limit", "1", *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_without_bfcls_data_it_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(bfcl_data, "installed_data_dir", lambda: None)
    result = invoke("bfcl", "--base-url", "http://127.0.0.1:9/v1")
    assert result.exit_code == 2
    assert "pip install --no-deps bfcl-eval" in result.stderr and result.stderr.count("\n") == 1


def test_a_run_where_every_case_fails_with_an_error_exits_1(httpserver):
    fake = FakeOpenAI(httpserver, lambda question, body: (503, {"error": {"message": "loading the model"}}))
    result = invoke("bfcl", "--base-url", fake.base_url, "--data", str(SAMPLE), "--category", "irrelevance")
    assert result.exit_code == 1
    assert table_rows(result.stdout)[("irrelevance", fake.base_url)]["error"] == "3"
    assert "every case failed with an error; the first: HTTP 503: loading the model" in result.stderr
