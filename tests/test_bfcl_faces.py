"""The same BFCL cases through llmproxy's own server on each face - chat, Responses, Messages - score
the same: a scripted backend writes each case's answer in the Hermes syntax, the server serves it
through the face, the runner reads it back and judges it (``run_cases``, the library entry point)."""

from __future__ import annotations

import json

import pytest
from bfcl_helpers import SAMPLE, right_calls, user_text
from server_helpers import ScriptedBackend, route

from llmproxy.evaluation.bfcl import load_cases, run_cases
from llmproxy.prompts import load_wrapper
from llmproxy.server.background import serving_in_background
from llmproxy.types import FunctionCall

CASES = load_cases(["simple_python", "parallel", "live_multiple", "irrelevance"], SAMPLE)
WRONG = {CASES[1].id, CASES[4].id}  # answered with a wrong value; the irrelevance cases in text


def written(case) -> str:
    """What a Hermes-style model writes for ``case``: its right calls (one value off where the case is
    in WRONG), or a sentence."""
    calls = right_calls(case)
    if not calls:
        return "No function here can answer that."
    if case.id in WRONG:
        name, arguments = calls[0]
        param = next(p for p, v in arguments.items() if type(v) in (int, float, str))
        value = arguments[param]
        calls[0] = (name, {**arguments, param: value + 1 if not isinstance(value, str) else value + " and more"})
    syntax = load_wrapper("hermes").wrapper.spec.syntax
    turn = syntax.render_turn("", [FunctionCall(name=name, arguments=json.dumps(arguments))
                                   for name, arguments in calls])
    return "\n".join(turn.calls)


def script(prompt: str) -> str:
    return written(next(case for case in CASES if user_text(case.messages) in prompt))


@pytest.fixture(scope="module")
def base_url():
    with serving_in_background({"hermes": route(ScriptedBackend(script), "hermes", wrapper="hermes")}) as url:
        yield url


def test_every_face_gives_the_same_verdicts(base_url):
    verdicts = {}
    for face in ("chat", "responses", "messages"):
        results = run_cases(CASES, base_url, face=face, target="llmproxy")
        assert [result.id for result in results] == [case.id for case in CASES]
        assert all(result.status == 200 and result.face == face for result in results)
        verdicts[face] = [(r.id, r.correct, r.kind, r.bfcl_error_type, [c["name"] for c in r.calls]) for r in results]
    assert verdicts["chat"] == verdicts["responses"] == verdicts["messages"]
    right = {case_id for case_id, correct, *_ in verdicts["chat"] if correct}
    assert right == {case.id for case in CASES} - WRONG
    assert {kind for _, correct, kind, *_ in verdicts["chat"] if not correct} == {"wrong_value"}
    parallel = next(v for v in verdicts["chat"] if v[0].startswith("parallel"))
    assert len(parallel[4]) > 1  # several calls in one answer, read back through each face
