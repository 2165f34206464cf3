"""BFCL's cases read from its layout, and sent as BFCL's own handlers send them: each face's request
body is compared with what BFCL's chat-completions, Responses and Claude handlers passed to their SDKs
for the same cases (recorded by bench/bfcl_fixtures.py in tests/fixtures/bfcl/requests.jsonl); each
face's answer read back into the same calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from llmproxy.errors import ConfigurationError
from llmproxy.evaluation.bfcl import CATEGORIES, FACES, INSTALL_HINT, load_cases
from llmproxy.evaluation.bfcl import data as bfcl_data
from llmproxy.evaluation.bfcl.faces import MESSAGES_MAX_TOKENS
from llmproxy.evaluation.bfcl.tools import tool_function

SAMPLE = Path(__file__).parent / "fixtures" / "bfcl"
RECORDED = {line["id"]: line for line in map(json.loads, (SAMPLE / "requests.jsonl").read_text("utf-8").splitlines())}
CASES = load_cases(folder=SAMPLE)


def test_the_sample_holds_every_category_with_answers_where_bfcl_has_them():
    by_category = {category: [case for case in CASES if case.category == category] for category in CATEGORIES}
    assert all(len(cases) == 3 for cases in by_category.values())
    for case in CASES:
        assert case.irrelevance == (case.category in ("irrelevance", "live_irrelevance"))
        assert case.messages and all("role" in message for message in case.messages)  # the first turn
        assert case.irrelevance or all(len(call) == 1 for call in case.ground_truth)


def test_a_limited_run_draws_the_same_sample_for_the_same_seed():
    first = [case.id for case in load_cases(["live_simple", "multiple"], SAMPLE, limit=2, seed=3)]
    assert first == [case.id for case in load_cases(["live_simple", "multiple"], SAMPLE, limit=2, seed=3)]
    assert [case.category for case in load_cases(["live_simple", "multiple"], SAMPLE, limit=2, seed=3)] == \
        ["live_simple"] * 2 + ["multiple"] * 2
    # A category's sample does not depend on the others asked for.
    alone = [case.id for case in load_cases(["multiple"], SAMPLE, limit=2, seed=3)]
    assert alone == first[2:]
    seeds = {tuple(case.id for case in load_cases(["multiple"], SAMPLE, limit=1, seed=seed)) for seed in range(12)}
    assert len(seeds) > 1
    # Kept in the file's order.
    order = [case.id for case in CASES if case.category == "multiple"]
    assert alone == sorted(alone, key=order.index)


def test_an_unknown_category_names_the_known_ones():
    with pytest.raises(ConfigurationError, match="unknown BFCL category 'simple'.*simple_python"):
        load_cases(["simple"], SAMPLE)


def test_without_the_package_or_a_folder_the_error_says_how_to_install_the_data(monkeypatch):
    monkeypatch.setattr(bfcl_data, "installed_data_dir", lambda: None)
    with pytest.raises(ConfigurationError, match=f"not installed: {INSTALL_HINT}"):
        load_cases(["simple_python"])


def test_a_folder_without_bfcls_files_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="holds no BFCL data"):
        load_cases(["simple_python"], tmp_path)


def test_the_installed_package_is_found_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "bfcl_eval"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bfcl_eval", raising=False)
    assert bfcl_data.installed_data_dir() == package / "data"
    assert "bfcl_eval" not in sys.modules


@pytest.mark.parametrize("face", ["chat", "responses", "messages"])
def test_each_face_sends_a_case_as_bfcls_handler_does(face):
    for case in CASES:
        body = FACES[face].body(case, "some-model")
        assert body.pop("model") == "some-model"
        expected = dict(RECORDED[case.id][face])
        if face == "messages":  # required there: BFCL sends the model's maximum, we a fixed one
            assert body.pop("max_tokens") == MESSAGES_MAX_TOKENS
            expected.pop("max_tokens")
        assert body == expected, case.id


def test_the_sample_shows_what_the_conversion_has_to_handle():
    """So that the comparison above covers it: floats, dicts, tuples, nested items, dotted names and
    system messages."""
    tools = json.dumps([RECORDED[case.id]["chat"].get("tools") for case in CASES])
    assert '"format": "float"' in tools and "This is a float type value." in tools
    assert '"type": "dict"' not in tools and '"type": "tuple"' not in tools and '"type": "any"' not in tools
    assert any("." in doc["name"] for case in CASES for doc in case.functions)
    assert any(message["role"] == "system" for case in CASES for message in case.messages)


def test_the_tool_conversion_maps_python_types_and_leaves_the_doc_alone():
    doc = {"name": "geo.distance", "description": "Distance.", "parameters": {
        "type": "dict", "required": ["a"], "properties": {
        "a": {"type": "tuple", "items": {"type": "float"}, "description": "A point."},
        "options": {"type": "dict", "properties": {"unit": {"type": "any", "description": "Unit."}}},
        "scale": {"type": "float", "description": "Scale."}, "label": {"description": "No type."}}}}
    before = json.dumps(doc)
    function = tool_function(doc)
    assert json.dumps(doc) == before
    assert function["name"] == "geo_distance"
    assert function["description"] == "Distance. Note that the provided function is in Python 3 syntax."
    properties = function["parameters"]["properties"]
    assert function["parameters"]["type"] == "object"
    assert properties["a"] == {"type": "array", "items": {"type": "number"}, "description": "A point."}
    assert properties["options"]["type"] == "object"
    assert properties["options"]["properties"]["unit"]["type"] == "string"
    assert properties["scale"] == {"type": "number", "format": "float",
                                   "description": "Scale. This is a float type value."}
    assert properties["label"]["type"] == "string"


ARGUMENTS = '{"number": 5}'
REPLIES = {
    "chat": {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "math_factorial", "arguments": ARGUMENTS}}]}}]},
    "responses": {"output": [{"type": "reasoning", "summary": []}, {"type": "function_call", "call_id": "c1",
                                                                    "name": "math_factorial", "arguments": ARGUMENTS}]},
    "messages": {"content": [{"type": "text", "text": "Let me call it."},
                             {"type": "tool_use", "id": "t1", "name": "math_factorial", "input": {"number": 5}}]},
}


@pytest.mark.parametrize("face", ["chat", "responses", "messages"])
def test_each_face_reads_a_call_back_the_same_way(face):
    reply = FACES[face].reply(REPLIES[face])
    assert [(call.name, json.loads(call.arguments)) for call in reply.calls] == [("math_factorial", {"number": 5})]
    assert reply.model_result() == [{"math_factorial": reply.calls[0].arguments}]


def test_text_answers_are_kept_as_bfcls_handlers_keep_them():
    chat = FACES["chat"].reply({"choices": [{"message": {"role": "assistant", "content": "No."}}]})
    responses = FACES["responses"].reply({"output": [{"type": "message", "content": [
        {"type": "output_text", "text": "No"}, {"type": "output_text", "text": "."}]}]})
    messages = FACES["messages"].reply({"content": [{"type": "text", "text": "No."}]})
    assert (chat.model_result(), responses.model_result(), messages.model_result()) == ("No.", "No.", ["No."])
    assert FACES["responses"].reply({"output": []}).model_result() == ""
    assert not chat.calls and chat.text == "No."


@pytest.mark.parametrize("face", ["chat", "responses", "messages"])
def test_a_body_that_is_not_the_faces_answer_is_a_value_error(face):
    with pytest.raises(ValueError, match="in the response"):
        FACES[face].reply({"error": "nope"})
