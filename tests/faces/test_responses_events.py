"""A streamed answer becomes the Responses API's events: the canonical order per item, dense output
indices, one sequence over the whole stream, one response id, calls whole in ``output_item.done``, a
terminal event carrying the response (the same ids as streamed) - and the openai SDK's own stream
accumulator rebuilding that response from the bytes."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from responses_helpers import (CREATED, RESPONSE_ID, answer_call, body, chat_chunks, codex_body, parse_sse,
                               sdk_client, stream)

from llmproxy.errors import ContextWindowExceededError, OutputParseError, OverloadedError
from llmproxy.faces.responses import ResponsesEvents, read_request, response_object
from llmproxy.types import ChatCompletion, ChatCompletionChunk, Choice, ChunkChoice, Delta, ResponseMessage, Usage

THOUGHT = "The user wants the files listed."
CODEX_ANSWER = (f"<think>\n{THOUGHT}\n</think>\n\nLet me look \u00e9.\n" + "\n".join([
    answer_call("exec_command", {"cmd": "ls -la"}),
    answer_call("apply_patch", {"input": "*** Begin Patch\nadd a line\n*** End Patch"}),
    answer_call("mcp__files__list", {"path": "/tmp"})]))
EVENTS = TypeAdapter(ResponseStreamEvent)

# Each item's events, in order, its deltas folded into one "+".
CANONICAL = {
    "reasoning": ["output_item.added", "reasoning_summary_part.added", "reasoning_summary_text.delta+",
                  "reasoning_summary_text.done", "reasoning_summary_part.done", "output_item.done"],
    "message": ["output_item.added", "content_part.added", "output_text.delta+", "output_text.done",
                "content_part.done", "output_item.done"],
    "function_call": ["output_item.added", "function_call_arguments.delta+", "function_call_arguments.done",
                      "output_item.done"],
    "custom_tool_call": ["output_item.added", "custom_tool_call_input.delta+", "custom_tool_call_input.done",
                         "output_item.done"],
}


def item_events(payloads):
    """[(item type, [its event types, deltas folded])] in stream order; each item's events must be
    contiguous, carry its output_index (dense, in order) and its item id."""
    items: list[tuple[str, list[str]]] = []
    item_id = None
    for payload in payloads:
        if "output_index" not in payload:
            continue
        kind = payload["type"].removeprefix("response.")
        if kind == "output_item.added":
            assert payload["output_index"] == len(items)
            item_id = payload["item"]["id"]
            items.append((payload["item"]["type"], []))
        assert payload["output_index"] == len(items) - 1, payload
        assert payload.get("item_id", payload.get("item", {}).get("id")) == item_id
        kinds = items[-1][1]
        if kind.endswith(".delta"):
            kind += "+"
            if kinds[-1] == kind:
                continue
        kinds.append(kind)
    return items


def sdk_final(frames):
    """The response the openai SDK's stream helper rebuilds from the bytes, and its typed events."""
    client = sdk_client(b"".join(frames), stream=True)
    with client.responses.stream(model="m", input="Hi") as sdk_stream:
        typed = list(sdk_stream)
        return sdk_stream.get_final_response(), typed


def check_stream(streamed):
    """What every stream must be; gives the payloads."""
    named = parse_sse(b"".join(streamed.frames))
    payloads = [payload for _, payload in named]
    assert all(name == payload["type"] for name, payload in named)
    assert [payload["sequence_number"] for payload in payloads] == list(range(len(payloads)))
    assert [p["type"] for p in payloads[:2]] == ["response.created", "response.in_progress"]
    terminal = [p for p in payloads if p["type"] in ("response.completed", "response.incomplete", "response.failed")]
    assert terminal == [payloads[-1]]
    assert {p["response"]["id"] for p in payloads if "response" in p} == {RESPONSE_ID}
    assert payloads[0]["response"]["status"] == "in_progress" and payloads[0]["response"]["output"] == []
    for payload in payloads:
        EVENTS.validate_python(payload)  # every event as the SDK's strict types have it
    final = payloads[-1]["response"]
    assert final == streamed.events.final
    # The terminal response lists the items as their output_item.done events sent them.
    assert final["output"] == [p["item"] for p in payloads if p["type"] == "response.output_item.done"]
    Response.model_validate(final)
    return payloads


def test_a_codex_turn_streams_reasoning_text_and_calls_in_canonical_order():
    streamed = stream(codex_body(), CODEX_ANSWER)
    payloads = check_stream(streamed)
    items = item_events(payloads)
    assert [kind for kind, _ in items] == ["reasoning", "message", "function_call", "function_call", "custom_tool_call"]
    for kind, events in items:
        assert events == CANONICAL[kind]
    final = streamed.events.final
    reasoning, message, command, listing, patch = final["output"]
    assert reasoning["summary"][0]["text"] == THOUGHT and reasoning["encrypted_content"].endswith(THOUGHT)
    assert message["content"][0]["text"] == "Let me look \u00e9."
    assert (command["name"], json.loads(command["arguments"])) == ("exec_command", {"cmd": "ls -la"})
    assert (listing["name"], listing["namespace"], json.loads(listing["arguments"])) == ("list", "mcp__files__",
                                                                                         {"path": "/tmp"})
    assert (patch["name"], patch["input"]) == ("apply_patch", "*** Begin Patch\nadd a line\n*** End Patch")
    # The deltas add up to what each done event says.
    texts = {"reasoning_summary_text": "", "output_text": "", "function_call_arguments": ""}
    for payload in payloads:
        for kind in texts:
            if payload["type"] == f"response.{kind}.delta":
                texts[kind] += payload["delta"]
    assert texts == {"reasoning_summary_text": THOUGHT, "output_text": message["content"][0]["text"],
                     "function_call_arguments": command["arguments"] + listing["arguments"]}
    # The call ids are the chat chunks' ids; the final response agrees with a whole (non-streamed) one.
    added = [p["item"] for p in payloads if p["type"] == "response.output_item.added"]
    assert [item["id"] for item in added] == [item["id"] for item in final["output"]]
    assert [item.get("call_id") for item in added] == [item.get("call_id") for item in final["output"]]
    whole = response_object(streamed.request, streamed.completion, response_id=RESPONSE_ID, created_at=CREATED)
    strip = {"id", "call_id"}
    assert sorted(json.dumps({k: v for k, v in item.items() if k not in strip}, sort_keys=True)
                  for item in whole["output"]) == sorted(
        json.dumps({k: v for k, v in item.items() if k not in strip}, sort_keys=True) for item in final["output"])
    assert final["usage"] == whole["usage"] and final["status"] == "completed"


def test_the_sdk_stream_helper_rebuilds_the_same_response():
    streamed = stream(codex_body(), CODEX_ANSWER, size=3)
    check_stream(streamed)
    final, typed = sdk_final(streamed.frames)
    assert final.id == RESPONSE_ID and final.output_text == "Let me look \u00e9."
    assert [item.model_dump(exclude_none=True) for item in final.output] == [
        Response.model_validate(streamed.events.final).output[n].model_dump(exclude_none=True)
        for n in range(len(final.output))]
    assert typed[0].type == "response.created" and typed[-1].type == "response.completed"
    text = "".join(event.delta for event in typed if event.type == "response.output_text.delta")
    assert text == final.output_text


def test_a_plain_text_answer_streams_one_message():
    streamed = stream(body("Hi", stream=True), "Hello! How can I help?")
    payloads = check_stream(streamed)
    assert item_events(payloads) == [("message", CANONICAL["message"])]
    assert sdk_final(streamed.frames)[0].output_text == "Hello! How can I help?"


def test_calls_checked_before_they_are_sent_come_whole_at_the_end():
    streamed = stream(codex_body(), CODEX_ANSWER, grammar=False)
    payloads = check_stream(streamed)
    assert [kind for kind, _ in item_events(payloads)] == ["reasoning", "message", "function_call",
                                                           "function_call", "custom_tool_call"]
    deltas = [p for p in payloads if p["type"] == "response.function_call_arguments.delta"]
    assert len(deltas) == 2  # one each, the whole arguments
    assert sdk_final(streamed.frames)[0].output[2].arguments == '{"cmd": "ls -la"}'


def test_an_answer_of_calls_alone_or_of_nothing_has_the_items_it_should():
    calls = stream(codex_body(), answer_call("exec_command", {"cmd": "pwd"}))
    assert [kind for kind, _ in item_events(check_stream(calls))] == ["function_call"]
    empty = stream(body("Hi", stream=True), "")
    assert item_events(check_stream(empty)) == [("message", ["output_item.added", "content_part.added",
                                                              "output_text.done", "content_part.done",
                                                              "output_item.done"])]
    thought_only = stream(codex_body(), "<think>\nHmm.\n</think>\n\n")
    assert [kind for kind, _ in item_events(check_stream(thought_only))] == ["reasoning", "message"]


def test_an_answer_cut_at_the_token_limit_ends_incomplete():
    streamed = stream(body("Tell me a story.", stream=True, max_output_tokens=5), "Once upon a", "length")
    payloads = check_stream(streamed)
    assert payloads[-1]["type"] == "response.incomplete"
    assert payloads[-1]["response"]["status"] == "incomplete"
    assert payloads[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_keepalives_and_the_sequence_they_share():
    request = read_request(body("Hi", stream=True))
    events = ResponsesEvents(request, FakeChunks([]), response_id=RESPONSE_ID, created_at=CREATED)
    frames = events.opening() + [events.keepalive(), events.keepalive()]
    payloads = [payload for _, payload in parse_sse(b"".join(frames))]
    assert [p["type"] for p in payloads] == ["response.created"] + ["response.in_progress"] * 3
    assert [p["sequence_number"] for p in payloads] == [0, 1, 2, 3]
    assert payloads[-1]["response"]["status"] == "in_progress" and events.end == b""
    assert events.opening() == []  # sent once


def test_a_stream_opens_properly_whichever_step_comes_first():
    request = read_request(body("Hi", stream=True))
    for first in (lambda e: [e.keepalive()], lambda e: e.failure(RuntimeError("bug")), lambda e: e.feed("x")):
        events = ResponsesEvents(request, FakeChunks([]), response_id=RESPONSE_ID, created_at=CREATED)
        payloads = [payload for _, payload in parse_sse(b"".join(first(events)))]
        assert [p["type"] for p in payloads[:2]] == ["response.created", "response.in_progress"]
        assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))


@pytest.mark.parametrize("error, code", [
    (ContextWindowExceededError(5000, 4096), "context_length_exceeded"),
    (OutputParseError("The answer was not JSON.", "raw"), "unparseable_output"),
    (OverloadedError("busy", retry_after=3), "rate_limit_exceeded"),
    (RuntimeError("bug"), "internal_error"),
])
def test_a_failure_ends_the_stream_with_response_failed(error, code):
    raw = "Let me look.\n" + answer_call("exec_command", {"cmd": "ls"})
    request = read_request(codex_body())
    events = ResponsesEvents(request, chat_chunks(request), response_id=RESPONSE_ID, created_at=CREATED)
    frames = events.opening() + events.feed(raw[:raw.index('"ls"')]) + events.failure(error)
    payloads = [payload for _, payload in parse_sse(b"".join(frames))]
    failed = payloads[-1]
    assert failed["type"] == "response.failed" and failed["sequence_number"] == len(payloads) - 1
    response = failed["response"]
    assert response["status"] == "failed" and response["id"] == RESPONSE_ID
    assert response["error"]["code"] == code and response["error"]["message"]
    assert "Traceback" not in response["error"]["message"]
    # The message was closed when the call began; the half-sent call is not passed off as whole.
    assert [item["type"] for item in response["output"]] == ["message"]
    assert not any(p["type"] == "response.output_item.done" and p["item"]["type"] == "function_call"
                   for p in payloads)
    assert events.final is None
    typed = list(sdk_client(b"".join(frames), stream=True).responses.create(model="m", input="Hi", stream=True))
    assert typed[-1].type == "response.failed" and typed[-1].response.error.message  # the SDK reads it, no raise


def test_sent_text_follows_the_chat_chunks():
    streamed = stream(body("Hi", stream=True), "Hello.")
    assert streamed.events.sent_text
    fresh = ResponsesEvents(streamed.request, FakeChunks([]), response_id=RESPONSE_ID, created_at=CREATED)
    assert not fresh.sent_text


def test_text_with_a_lone_surrogate_is_still_valid_utf8():
    streamed = stream(body("Hi", stream=True), "broken \ud800 half")
    payloads = check_stream(streamed)
    assert streamed.events.final["output"][0]["content"][0]["text"] == "broken \ud800 half"
    assert payloads[-1]["response"]["output"][0]["content"][0]["text"] == "broken \ud800 half"


class FakeChunks:
    """Chat chunks given by hand, for orders the pipeline makes only rarely."""

    model = "m"

    def __init__(self, deltas: list[Delta], closing: list[Delta] = ()) -> None:
        self._deltas, self._closing = deltas, list(closing)
        self.sent_text = False

    def _chunk(self, delta):
        return ChatCompletionChunk(id="c", created=0, model="m", choices=[ChunkChoice(delta=delta)])

    def feed_plain(self, text):
        self.sent_text = True
        return "", [self._chunk(self._deltas.pop(0))] if self._deltas else []

    def closing(self, completion):
        return [self._chunk(delta) for delta in self._closing]


def test_reasoning_found_only_at_the_end_follows_the_text_and_replays_onto_its_turn():
    request = read_request(codex_body())
    chunks = FakeChunks([Delta(content="Hello.")], closing=[Delta(reasoning_content="Found late.")])
    events = ResponsesEvents(request, chunks, response_id=RESPONSE_ID, created_at=CREATED)
    message = ResponseMessage(content="Hello.", reasoning_content="Found late.")
    completion = ChatCompletion(model="m", choices=[Choice(message=message, finish_reason="stop")],
                                usage=Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3))
    frames = events.opening() + events.feed("x") + events.closing(completion)
    payloads = [payload for _, payload in parse_sse(b"".join(frames))]
    assert [kind for kind, _ in item_events(payloads)] == ["message", "reasoning"]
    replay = read_request(body([{"role": "user", "content": "Hi"}, *events.final["output"],
                                {"role": "user", "content": "And?"}]))
    assert replay.chat.messages[1].content == "Hello." and replay.chat.messages[1].reasoning_content == "Found late."


def test_the_streamed_turn_replays_as_the_next_requests_history():
    streamed = stream(codex_body(), CODEX_ANSWER)
    outputs = [{"type": "function_call_output", "call_id": item["call_id"], "output": "ok"}
               for item in streamed.events.final["output"] if item["type"] == "function_call"]
    replayed = [{k: v for k, v in item.items() if k != "id"} for item in streamed.events.final["output"]]  # as Codex
    request = read_request(codex_body(["List the files.", *replayed, *outputs][1:]))
    turn = request.chat.messages[0]
    assert turn.reasoning_content == THOUGHT and turn.content == "Let me look \u00e9."
    assert [c.function.name for c in turn.tool_calls] == ["exec_command", "mcp__files__list", "apply_patch"]
    assert json.loads(turn.tool_calls[2].function.arguments) == {"input": "*** Begin Patch\nadd a line\n*** End Patch"}
    assert [m.tool_call_id for m in request.chat.messages[1:]] == [c.id for c in turn.tool_calls[:2]]
