"""POST /v1/responses end to end: the official openai SDK (and openai-agents) against a real running
server whose backend writes scripted answers in the Hermes call syntax, so every assertion is about
what the face made of a known answer. The translations themselves are tested in tests/faces/.
"""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from pydantic import BaseModel
from server_helpers import FIXTURES, ScriptedBackend, fake_llamacpp, route, running

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "description": "The time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def serve(backend: ScriptedBackend, wrapper: str = "hermes", **options):
    # As `llmproxy serve` with flags: the one model answers every name (Codex sends OpenAI's).
    return running({"local": route(backend, "local", wrapper=wrapper, **options)}, default_model="local")


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def test_a_text_answer_is_a_completed_response_with_usage():
    with serve(ScriptedBackend("Hello from a local model.")) as server:
        response = client(server).responses.create(model="gpt-5-codex", input="Hi")
    assert response.id.startswith("resp_") and response.status == "completed"
    assert response.output_text == "Hello from a local model."
    assert response.model == "gpt-5-codex"
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_tool_loop_calls_then_answers_with_the_result_in_the_prompt():
    backend = ScriptedBackend([call("get_weather", {"city": "Paris"}), "It is 21 degrees in Paris."])
    with serve(backend) as server:
        api = client(server)
        first = api.responses.create(model="local", input="Weather in Paris?", tools=[WEATHER])
        [item] = first.output
        assert item.type == "function_call" and item.name == "get_weather"
        assert json.loads(item.arguments) == {"city": "Paris"} and item.call_id
        history = [{"role": "user", "content": "Weather in Paris?"}, *[i.model_dump() for i in first.output],
                   {"type": "function_call_output", "call_id": item.call_id, "output": '{"temperature": 21}'}]
        second = api.responses.create(model="local", input=history, tools=[WEATHER])
    assert second.output_text == "It is 21 degrees in Paris."
    assert '"temperature": 21' in backend.prompts[1] and "get_weather" in backend.prompts[1]


def _shape(response) -> list[tuple]:
    """What two answers to the same script must share (ids differ between requests)."""
    shape = []
    for item in response.output:
        if item.type == "message":
            shape.append(("message", item.content[0].text))
        elif item.type == "function_call":
            shape.append(("function_call", item.name, item.arguments))
        else:
            shape.append((item.type,))
    return shape


@pytest.mark.parametrize("answer", ["A plain answer, streamed.",
                                    "Let me look.\n" + call("get_weather", {"city": "Oslo"})
                                    + "\n" + call("get_time", {"city": "Oslo"})])
def test_the_streamed_final_response_equals_the_whole_one(answer):
    with serve(ScriptedBackend(lambda prompt: answer)) as server:
        api = client(server)
        whole = api.responses.create(model="local", input="Oslo?", tools=[WEATHER, TIME])
        with api.responses.stream(model="local", input="Oslo?", tools=[WEATHER, TIME]) as stream:
            events = list(stream)
            final = stream.get_final_response()
    assert _shape(final) == _shape(whole) and final.usage == whole.usage and final.status == whole.status
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert {getattr(e, "response", final).id for e in events} == {final.id}


class Weather(BaseModel):
    city: str
    temperature: int


def test_parse_with_a_text_format_reads_the_schema_answer():
    backend = ScriptedBackend('{"city": "Paris", "temperature": 21}')
    with serve(backend) as server:
        parsed = client(server).responses.parse(model="local", input="Weather?", text_format=Weather)
    assert parsed.output_parsed == Weather(city="Paris", temperature=21)
    assert backend.params[0].grammar is not None and "temperature" in backend.params[0].grammar


@pytest.mark.parametrize("tool_choice, offered, grammar_names", [
    ("none", set(), None),
    ("auto", {"get_weather", "get_time"}, {"get_weather", "get_time"}),
    ("required", {"get_weather", "get_time"}, {"get_weather", "get_time"}),
    ({"type": "function", "name": "get_time"}, {"get_weather", "get_time"}, {"get_time"}),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]},
     {"get_time"}, {"get_time"}),
])
def test_every_tool_choice_form_constrains_what_may_be_called(tool_choice, offered, grammar_names):
    backend = ScriptedBackend(call("get_time", {"city": "Oslo"}) if grammar_names else "No tools needed.")
    with serve(backend) as server:
        response = client(server).responses.create(model="local", input="Time in Oslo?", tools=[WEATHER, TIME],
                                                   tool_choice=tool_choice)
    prompt, grammar = backend.prompts[0], backend.params[0].grammar
    assert {name for name in ("get_weather", "get_time") if name in prompt} == offered
    if grammar_names is None:
        assert grammar is None and response.output_text == "No tools needed."
    else:
        assert {name for name in ("get_weather", "get_time") if name in grammar} == grammar_names
        assert response.output[-1].type == "function_call" and response.output[-1].name == "get_time"
    if tool_choice == "required":  # a call is the only way the answer may go
        assert not re.search(r"^root ::= .*text", grammar, re.M)


def test_a_named_tool_that_is_not_offered_is_a_400_naming_tool_choice():
    with serve(ScriptedBackend("unused")) as server, pytest.raises(openai.BadRequestError) as error:
        client(server).responses.create(model="local", input="x", tools=[WEATHER],
                                        tool_choice={"type": "function", "name": "nope"})
    assert error.value.body["param"] == "tool_choice"


def test_a_namespace_tools_call_comes_back_with_its_namespace_and_the_childs_name():
    def script(prompt: str) -> str:
        internal = re.search(r'"name": "([^"]*read_file[^"]*)"', prompt).group(1)
        return call(internal, {"path": "a.txt"})

    namespace = {"type": "namespace", "name": "mcp__files__", "description": "Files.",
                 "tools": [{"type": "function", "name": "read_file", "parameters": {
                     "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]}
    with serve(ScriptedBackend(script)) as server:
        response = client(server).responses.create(model="local", input="Read a.txt", tools=[namespace])
    [item] = response.output
    assert (item.type, item.name, json.loads(item.arguments)) == ("function_call", "read_file", {"path": "a.txt"})
    assert item.namespace == "mcp__files__"


APPLY_PATCH_GRAMMAR = (FIXTURES / "apply_patch.lark").read_text(encoding="utf-8")  # as Codex sends it
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello \"world\"\n*** End Patch\n"


def test_a_custom_tool_with_codexs_lark_grammar_is_constrained_and_comes_back_as_its_raw_input():
    def script(prompt: str) -> str:
        internal = re.search(r'"name": "([^"]*apply_patch[^"]*)"', prompt).group(1)
        return call(internal, {"input": PATCH})

    tool = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR}}
    backend = ScriptedBackend(script)
    with serve(backend) as server:
        response = client(server).responses.create(model="local", input="Add hello.txt", tools=[tool])
    [item] = response.output
    assert (item.type, item.name, item.input) == ("custom_tool_call", "apply_patch", PATCH)
    assert "*** Begin Patch" in backend.params[0].grammar  # the patch's grammar, as a JSON string's content


def test_stored_responses_continue_by_id_and_can_be_read_and_deleted():
    backend = ScriptedBackend(["My name is Sam.", "You asked my name."])
    with serve(backend) as server:
        api = client(server)
        first = api.responses.create(model="local", input="What is your name?", instructions="Be brief.")
        second = api.responses.create(model="local", input="What did I ask?", previous_response_id=first.id)
        assert "What is your name?" in backend.prompts[1] and "My name is Sam." in backend.prompts[1]
        assert "Be brief." not in backend.prompts[1]  # instructions are not inherited
        assert api.responses.retrieve(second.id).output_text == "You asked my name."
        metrics = httpx.get(server.base_url.removesuffix("/v1") + "/metrics").text
        assert re.search(r"^llmproxy_stored_responses 2\.0$", metrics, re.M)
        assert re.search(r"^llmproxy_stored_response_bytes [1-9]", metrics, re.M)
        api.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError) as missing:
            api.responses.create(model="local", input="x", previous_response_id=first.id)
        assert "previous_response_id" in missing.value.message
        with pytest.raises(openai.BadRequestError) as conversation:
            api.responses.create(model="local", input="x", extra_body={"conversation": "conv_1"})
        assert conversation.value.body["param"] == "conversation"


def test_an_image_in_a_tool_result_is_replaced_by_a_note_and_the_turn_goes_on():
    backend = ScriptedBackend("I cannot see images.")
    history = [{"role": "user", "content": "Look"},
               {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": [
                   {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]
    tool = {"type": "function", "name": "view_image", "parameters": {"type": "object", "properties": {}}}
    with serve(backend) as server:
        response = client(server).responses.create(model="local", input=history, tools=[tool])
    assert response.output_text == "I cannot see images."
    assert "image" in backend.prompts[0] and "base64" not in backend.prompts[0]
    assert any("image" in note for note in response.model_extra["llmproxy"]["notes"])


def test_a_long_prompt_read_gets_keepalive_events_before_the_answer(monkeypatch):
    monkeypatch.setattr("llmproxy.server.responses.KEEPALIVE_SECONDS", 0.05)
    with serve(ScriptedBackend("Done.", first_delay=0.5)) as server:
        with httpx.stream("POST", server.base_url + "/responses", json={"model": "local", "input": "Hi", "stream": True},
                          timeout=10) as answer:
            events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    types = [event["type"] for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types.count("response.in_progress") >= 4 and types[-1] == "response.completed"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


def test_a_long_prompt_read_by_an_http_backend_gets_keepalive_events_too(monkeypatch):
    # A backend on the event loop: its own reader says when nothing came (llmproxy.backends.base.IDLE).
    monkeypatch.setattr("llmproxy.server.responses.KEEPALIVE_SECONDS", 0.05)
    with fake_llamacpp() as fake:
        fake.mode, fake.hang_seconds, fake.script = "hang", 0.5, "Done."
        with running({"local": route(fake.backend(), "local")}, default_model="local") as server:
            with httpx.stream("POST", server.base_url + "/responses", timeout=10,
                              json={"model": "local", "input": "Hi", "stream": True}) as answer:
                events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    types = [event["type"] for event in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types.count("response.in_progress") >= 4
    assert types[-1] == "response.completed" and events[-1]["response"]["output"][0]["content"][0]["text"] == "Done."
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


def test_a_prompt_over_the_context_window_says_so_whole_and_streamed():
    with serve(ScriptedBackend("unused"), context_window=64) as server:
        api = client(server)
        with pytest.raises(openai.BadRequestError) as error:
            api.responses.create(model="local", input="word " * 400)
        assert error.value.code == "context_length_exceeded"
        events = list(api.responses.create(model="local", input="word " * 400, stream=True))
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "context_length_exceeded"


def test_an_openai_agents_agent_runs_a_tool_loop_to_its_end():
    agents = pytest.importorskip("agents", reason="openai-agents is in the test extra")
    agents.set_tracing_disabled(True)
    seen: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"21 degrees in {city}"

    backend = ScriptedBackend([call("get_weather", {"city": "Paris"}), "It is 21 degrees in Paris."])
    with serve(backend) as server:
        model = agents.OpenAIResponsesModel(model="local", openai_client=openai.AsyncOpenAI(
            base_url=server.base_url, api_key="unused", max_retries=0))
        agent = agents.Agent(name="weather", instructions="Use the tool.", tools=[get_weather], model=model)
        result = agents.Runner.run_sync(agent, "Weather in Paris?")
    assert seen == ["Paris"] and result.final_output == "It is 21 degrees in Paris."
    assert "21 degrees in Paris" in backend.prompts[1]
