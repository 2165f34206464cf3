"""The decide mode on the command line: ``serve --decide`` (and the mode it logs at start), and ``eval``'s
decision scenarios, built-in suites by name and ``--decide`` - against a fake llama.cpp server."""

from __future__ import annotations

import json
import logging

import pytest
import uvicorn
from cli_helpers import FakeLlamaCpp, invoke

from llmproxy.evaluation import builtin_scenarios_path, load_scenarios

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}


@pytest.fixture
def decision_suite(tmp_path):
    rows = [{"name": "needs-weather", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
             "tools": [TIME, WEATHER], "tool_choice": "auto", "decision": "call", "expect": "get_weather"},
            {"name": "needs-none", "messages": [{"role": "user", "content": "Hi!"}],
             "tools": [TIME, WEATHER], "tool_choice": "auto", "decision": "answer"}]
    path = tmp_path / "decisions.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_eval_scores_decisions_beside_validity(httpserver, decision_suite):
    call = '{"name": "get_time", "arguments": {"zone": "CET"}}'  # a valid call, but not to the function needed
    fake = FakeLlamaCpp(httpserver, [call, "Hello!"])
    result = invoke("eval", str(decision_suite), *fake.flags, "--wrapper", "chatml-json", "--grammar", "auto")
    assert result.exit_code == 0, result.output
    header, _, row = ([cell.strip() for cell in line.strip("|").split("|")] for line in result.stdout.splitlines()[:3])
    assert header[:6] == ["wrapper", "grammar", "decide", "valid calls", "correct function", "right decision"]
    assert row[:6] == ["chatml-json", "auto", "free", "2/2 (100%)", "1/2 (50%)", "1/2 (50%)"]
    fake.answers = ["Sunny, I think.", call]  # answering where a call is needed, calling where none is
    result = invoke("eval", str(decision_suite), *fake.flags, "--wrapper", "chatml-json", "--json")
    (summary,) = [s for s in json.loads(result.stdout)["results"] if s["grammar"] == "auto"]
    assert (summary["decide"], summary["valid"], summary["decisions"], summary["decision_total"]) == ("free", 2, 0, 2)
    assert [o["decided"] for o in summary["outcomes"]] == [False, False]


def test_eval_runs_a_built_in_suite_by_name(httpserver):
    fake = FakeLlamaCpp(httpserver, ["No tool needed."])
    result = invoke("eval", "decisions", *fake.flags, "--wrapper", "chatml-json", "--grammar", "auto", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["suite"] == "decisions"
    (summary,) = report["results"]
    scenarios = load_scenarios(builtin_scenarios_path("decisions"))
    answers = sum(s.decision == "answer" for s in scenarios)
    assert (summary["decision_total"], summary["decisions"]) == (len(scenarios), answers) and answers < len(scenarios)


def test_the_decision_suite_needs_calls_and_answers_beside_other_tools():
    scenarios = load_scenarios(builtin_scenarios_path("decisions"))
    assert all(s.request.choice().mode == "auto" and s.decision for s in scenarios)
    calls = [s for s in scenarios if s.decision == "call"]
    answers = [s for s in scenarios if s.decision == "answer"]
    assert len(calls) >= 6 and len(answers) >= 6
    assert all(s.expect in [f.name for f in s.request.function_definitions()] for s in calls)
    assert all(len(s.request.function_definitions()) >= 2 for s in scenarios)  # always a tool that does not fit


def test_eval_choose_where_the_route_cannot_is_one_line(httpserver, decision_suite):
    fake = FakeLlamaCpp(httpserver, ["Hello!"])
    result = invoke("eval", str(decision_suite), *fake.flags, "--wrapper", "chatml", "--decide", "choose")
    assert result.exit_code == 2
    assert "decide 'choose' is not possible here: the wrapper 'chatml' leaves the model no choice" in result.stderr


@pytest.fixture
def launched(monkeypatch):
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app_, **options: calls.append(app_))
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    return calls


def test_serve_logs_each_models_decide_mode(launched, httpserver, caplog):
    fake = FakeLlamaCpp(httpserver, ["Hello!"])
    with caplog.at_level(logging.INFO, logger="llmproxy.server"):
        result = invoke("serve", *fake.flags, "--wrapper", "chatml-json", "--decide", "free")
    assert result.exit_code == 0, result.output
    assert "wrapper chatml-json, grammar auto, tool_choice auto decided free" in caplog.text
    assert launched


@pytest.mark.parametrize(("flags", "message"), [
    (["--decide", "maybe"], "bad option --decide: Input should be 'free' or 'choose'"),
    (["--wrapper", "chatml", "--decide", "choose"], "the wrapper 'chatml' leaves the model no choice"),
])
def test_serve_refuses_a_decide_mode_it_cannot_use(launched, flags, message):
    result = invoke("serve", *flags)
    assert result.exit_code == 2 and message in result.stderr
    assert not launched


def test_serve_help_explains_decide():
    result = invoke("serve", "--help")
    assert "--decide" in result.stdout and "choose" in result.stdout
