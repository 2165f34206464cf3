"""Our checker gives BFCL's own verdict on every recorded answer.

tests/fixtures/bfcl_agreement.jsonl holds model-like answers to real BFCL cases (right ones, and each
kind of wrong one, made from the ground truths by mutation) with the verdict and error type BFCL's own
evaluation code gave each; bench/bfcl_fixtures.py made it from an installed bfcl-eval (and checks the
agreement on every case of every category, some 45,000 answers). bfcl-eval is not needed here.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from llmproxy.evaluation.bfcl import CATEGORIES
from llmproxy.evaluation.bfcl.checker import check_ast, check_irrelevance

FIXTURES = Path(__file__).parent / "fixtures"


def _lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines()]


ANSWERS = _lines("bfcl_agreement.jsonl")
CASES = {case["id"]: case for case in _lines("bfcl_agreement_cases.jsonl")}


def test_the_recorded_answers_cover_every_category_and_every_kind_of_answer():
    assert len(ANSWERS) >= 300
    assert {answer["category"] for answer in ANSWERS} == set(CATEGORIES)
    mutations = Counter(answer["mutation"] for answer in ANSWERS)
    for mutation in ("right", "right_other", "restyled", "text", "empty_text", "fewer_calls", "more_calls",
                     "wrong_function", "wrong_value", "wrong_type", "wrong_item_type", "missing_required",
                     "unexpected_argument", "leaked_text", "bad_json", "non_object", "call"):
        assert mutations[mutation], mutation
    verdicts = Counter(answer["error_type"] for answer in ANSWERS)
    assert verdicts[None] >= 50  # right answers, not only wrong ones
    for error_type in ("ast_decoder:decoder_failed", "simple_function_checker:missing_optional", "type_error:nested",
                       "value_error:dict_value", "value_error:list/tuple",
                       "parallel_function_checker_no_order:cannot_find_match", "irrelevance_error:decoder_success"):
        assert verdicts[error_type], error_type


@pytest.mark.parametrize("category", CATEGORIES)
def test_our_verdict_is_bfcls_on_every_recorded_answer(category):
    differing = []
    for answer in (a for a in ANSWERS if a["category"] == category):
        case = CASES[answer["id"]]
        if case["ground_truth"] is None:
            check = check_irrelevance(answer["answer"])
        else:
            check = check_ast(category, case["function"], case["ground_truth"], answer["answer"])
        if (check.valid, check.error_type) != (answer["valid"], answer["error_type"]):
            differing.append(f"{answer['id']} {answer['mutation']}: BFCL {answer['valid']} {answer['error_type']}, "
                             f"ours {check.valid} {check.error_type}")
    assert not differing, "\n".join(differing)
