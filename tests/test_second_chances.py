"""One retry rule for every face (llmproxy.proxy.Attempts), and a request's schemas checked once,
second chances included: in the library, the CLI's ``try`` and the server."""

from __future__ import annotations

import json

import openai
import pytest
from server_helpers import route, running
from test_server_retry import BAD, GOOD, TOOLS, Script
from typer.testing import CliRunner

from llmproxy import proxy
from llmproxy.cli import app
from llmproxy.commands import options as opt
from llmproxy.errors import OutputParseError
from llmproxy.proxy import Attempts, chat_completion
from llmproxy.types import ChatRequest

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "2 + 3?"}], "tools": TOOLS,
           "tool_choice": "required", "seed": 7}


def test_attempts_give_the_route_s_retries_each_told_what_was_wrong():
    tries = Attempts(ChatRequest.model_validate(REQUEST), retries=2)
    assert tries.count == 1
    assert tries.again(OutputParseError("no such function fly_to_moon.", BAD))
    assert tries.count == 2 and tries.request.seed == 8 and "fly_to_moon" in tries.request.messages[-1].content
    assert tries.again(OutputParseError("still wrong.", BAD))
    assert tries.count == 3 and tries.request.seed == 10 and len(tries.request.messages) == 3
    assert not tries.again(OutputParseError("wrong again.", BAD))  # no third retry: the last request stays
    assert tries.count == 3 and len(tries.request.messages) == 3


def test_no_retries_means_one_attempt():
    assert not Attempts(ChatRequest.model_validate(REQUEST), retries=0).again(OutputParseError("x.", BAD))


@pytest.fixture
def schema_checks(monkeypatch):
    """How many times the request's tool schemas were checked."""
    seen: list[str] = []
    checked = proxy.check_tool_parameters

    def counting(function, where):
        seen.append(where)
        return checked(function, where)

    monkeypatch.setattr(proxy, "check_tool_parameters", counting)
    return seen


def test_the_library_checks_the_schemas_once_second_chances_included(schema_checks):
    script = Script(BAD, BAD, GOOD)
    served = route(script, "m", wrapper="chatml-json", grammar="none")
    response = chat_completion(ChatRequest.model_validate(REQUEST), served)
    assert response.llmproxy.attempts == 3
    assert schema_checks == ["tools[0].function.parameters"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_server_checks_the_schemas_once_per_request_second_chances_included(schema_checks, stream):
    script = Script(BAD, GOOD)
    with running({"m": route(script, "m", wrapper="chatml-json", grammar="none")}) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        fields = {key: value for key, value in REQUEST.items() if key != "seed"}
        answer = client.chat.completions.create(**fields, stream=stream)
        if stream:
            answer = list(answer)
    assert len(script.prompts) == 2  # a second chance was taken
    assert schema_checks == ["tools[0].function.parameters"]


def test_try_checks_the_schemas_once_and_says_each_answer_it_could_not_use(schema_checks, monkeypatch, tmp_path):
    script = Script(BAD, GOOD)
    monkeypatch.setattr(opt, "open_route", lambda **kwargs: route(script, "m", wrapper="chatml-json", grammar="none"))
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(REQUEST), encoding="utf-8")
    result = CliRunner().invoke(app, ["try", str(request_file)])
    assert result.exit_code == 0, result.output
    assert "Trying again, told so." in result.output and "add" in result.output
    assert schema_checks == ["tools[0].function.parameters"]
