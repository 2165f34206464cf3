"""BFCL's AST rules as llmproxy.evaluation.bfcl.checker applies them, one rule at a time, and the kind
each failure is counted as."""

from __future__ import annotations

import json

import pytest

from llmproxy.evaluation.bfcl import Case, KINDS
from llmproxy.evaluation.bfcl import kinds as bfcl_kinds
from llmproxy.evaluation.bfcl.checker import check_ast, check_irrelevance
from llmproxy.evaluation.bfcl.faces import Call, Reply
from llmproxy.evaluation.bfcl.values import normalise
from llmproxy.evaluation.bfcl.verdicts import judge, server_failure

AREA = {"name": "geometry.area", "description": "Area of a shape.", "parameters": {
    "type": "dict", "required": ["shape", "size"], "properties": {
    "shape": {"type": "string", "description": "The shape."},
    "size": {"type": "float", "description": "Its size."},
    "count": {"type": "integer", "description": "How many."},
    "exact": {"type": "boolean", "description": "Exact or not."},
    "units": {"type": "array", "items": {"type": "string"}, "description": "Units."},
    "options": {"type": "dict", "description": "Options.", "properties": {"round": {"type": "integer"}}},
    "points": {"type": "array", "items": {"type": "dict"}, "description": "Points."},
    "anything": {"type": "any", "description": "Anything."}}}}
SEND = {"name": "send", "description": "Send it.", "parameters": {"type": "dict", "required": ["to"], "properties": {
    "to": {"type": "string", "description": "Whom."}}}}
TRUTH = {"geometry.area": {"shape": ["circle"], "size": [2.0], "count": ["", 1], "exact": ["", True],
                           "units": ["", ["square meters", "m2"]], "options": ["", {"round": [2]}],
                           "points": ["", [{"x": [1]}, {"x": [2]}]], "anything": [""]}}


def calls(*pairs) -> list[dict]:
    """BFCL's record of an answer: ``[{name: arguments JSON}]``."""
    return [{name: json.dumps(arguments)} for name, arguments in pairs]


def simple(arguments: dict, name: str = "geometry_area") -> tuple[bool, str | None]:
    check = check_ast("simple_python", [AREA], [TRUTH], calls((name, arguments)))
    return check.valid, check.error_type


RIGHT = {"shape": "circle", "size": 2.0}


def test_the_expected_call_is_right_and_optional_parameters_may_be_left_out():
    assert simple(RIGHT) == (True, None)
    assert simple({**RIGHT, "count": 1, "exact": True}) == (True, None)


def test_a_parameter_the_answer_needs_is_missing_even_where_the_doc_makes_it_optional():
    truth = {"geometry.area": {**TRUTH["geometry.area"], "count": [3]}}
    check = check_ast("simple_python", [AREA], [truth], calls(("geometry_area", RIGHT)))
    assert (check.valid, check.error_type) == (False, "simple_function_checker:missing_optional")
    assert simple({"shape": "circle"}) == (False, "simple_function_checker:missing_required")


def test_a_parameter_unknown_to_the_doc_or_the_answer_is_unexpected():
    assert simple({**RIGHT, "colour": "red"}) == (False, "simple_function_checker:unexpected_param")
    assert simple({**RIGHT, "anything": "x"}) == (False, "value_error:string")  # acceptable: "" (left out) only
    truth = {"geometry.area": {"shape": ["circle"], "size": [2.0]}}  # the doc has count, this answer not
    check = check_ast("simple_python", [AREA], [truth], calls(("geometry_area", {**RIGHT, "count": 1})))
    assert check.error_type == "simple_function_checker:unexpected_param"


def test_strings_compare_without_case_spaces_and_some_punctuation():
    assert normalise("April 1, 2024") == normalise("april 1 2024") == "april12024"
    assert normalise("it's") == 'it"s'
    assert simple({**RIGHT, "shape": "Cir-cle."}) == (True, None)
    assert simple({**RIGHT, "shape": "square"}) == (False, "value_error:string")


def test_an_int_is_a_fine_float_but_not_the_other_way_round():
    assert simple({**RIGHT, "size": 2}) == (True, None)
    assert simple({**RIGHT, "count": 1.0}) == (False, "type_error:simple")
    assert simple({**RIGHT, "size": "2.0"}) == (False, "type_error:simple")
    assert simple({**RIGHT, "count": True}) == (False, "type_error:simple")  # a bool is no int
    assert simple({**RIGHT, "size": 2.5}) == (False, "value_error:others")


def test_lists_compare_in_order_with_their_strings_normalised():
    assert simple({**RIGHT, "units": ["Square Meters", "m2"]}) == (True, None)
    assert simple({**RIGHT, "units": ["m2", "square meters"]}) == (False, "value_error:list/tuple")
    # An item of another type: a type error, except beside the optional marker, whose "" lets any items
    # pass the type check (BFCL's quirk), so the value is wrong instead.
    assert simple({**RIGHT, "units": ["m2", 3]}) == (False, "value_error:list/tuple")
    truth = {"geometry.area": {**TRUTH["geometry.area"], "units": [["m2", "square meters"]]}}
    check = check_ast("simple_python", [AREA], [truth], calls(("geometry_area", {**RIGHT, "units": ["m2", 3]})))
    assert check.error_type == "type_error:nested"


def test_dicts_compare_key_by_key_and_lists_of_dicts_in_order():
    assert simple({**RIGHT, "options": {"round": 2}}) == (True, None)
    assert simple({**RIGHT, "options": {"round": 3}}) == (False, "value_error:dict_value")
    assert simple({**RIGHT, "options": {"round": 2, "floor": 1}}) == (False, "value_error:dict_key")
    assert simple({**RIGHT, "points": [{"x": 1}, {"x": 2}]}) == (True, None)
    assert simple({**RIGHT, "points": [{"x": 2}, {"x": 1}]}) == (False, "value_error:dict_value")
    assert simple({**RIGHT, "points": [{"x": 1}]}) == (False, "value_error:list_dict_count")


def test_a_value_of_the_acceptable_answers_type_passes_where_the_doc_says_otherwise():
    """BFCL's "variable": a possible answer of another type than the doc's is compared as it is."""
    truth = {"geometry.area": {"shape": ["circle"], "size": [2.0], "anything": [7]}}
    assert check_ast("simple_python", [AREA], [truth], calls(("geometry_area", {**RIGHT, "anything": 7}))).valid
    wrong = check_ast("simple_python", [AREA], [truth], calls(("geometry_area", {**RIGHT, "anything": 8})))
    assert wrong.error_type == "value_error:others"


def test_the_function_is_named_with_underscores_for_dots():
    assert simple(RIGHT, "geometry_area") == (True, None)
    assert simple(RIGHT, "geometry.area") == (False, "simple_function_checker:wrong_func_name")
    assert simple(RIGHT, "send") == (False, "simple_function_checker:wrong_func_name")


def test_a_simple_case_wants_exactly_one_call():
    check = check_ast("simple_python", [AREA], [TRUTH], calls(("geometry_area", RIGHT), ("geometry_area", RIGHT)))
    assert check.error_type == "simple_function_checker:wrong_count"
    assert check_ast("live_simple", [AREA], [TRUTH], "").error_type == "simple_function_checker:wrong_count"


def test_text_and_arguments_that_are_not_an_object_fail_to_decode():
    assert check_ast("simple_python", [AREA], [TRUTH], "It is 12.57.").error_type == "ast_decoder:decoder_failed"
    assert check_ast("simple_python", [AREA], [TRUTH], None).error_type == "ast_decoder:decoder_failed"
    assert check_ast("simple_python", [AREA], [TRUTH], [{"geometry_area": "{oops"}]).error_type == \
        "ast_decoder:decoder_failed"
    assert check_ast("simple_python", [AREA], [TRUTH], [{"geometry_area": "[1]"}]).error_type == \
        "ast_decoder:decoder_wrong_output_format"


def test_multiple_wants_one_call_to_the_right_function_of_several():
    truth = [{"send": {"to": ["Ana"]}}]
    assert check_ast("multiple", [AREA, SEND], truth, calls(("send", {"to": "ana"}))).valid
    assert check_ast("multiple", [AREA, SEND], truth, calls(("geometry_area", RIGHT))).error_type == \
        "simple_function_checker:wrong_func_name"
    assert check_ast("live_multiple", [AREA, SEND], truth, calls(("send", {"to": "Ana"}), ("send", {"to": "Ana"}))
                     ).error_type == "multiple_function_checker:wrong_count"


def test_parallel_calls_match_in_any_order_and_a_miss_says_its_cause():
    truth = [{"send": {"to": ["Ana"]}}, {"send": {"to": ["Bo"]}}, TRUTH]
    answer = [("geometry_area", RIGHT), ("send", {"to": "Bo"}), ("send", {"to": "Ana"})]
    for category in ("parallel", "parallel_multiple", "live_parallel", "live_parallel_multiple"):
        assert check_ast(category, [AREA, SEND], truth, calls(*answer)).valid
    missed = check_ast("parallel", [AREA, SEND], truth, calls(answer[0], answer[1], ("send", {"to": "Cy"})))
    assert missed.error_type == "parallel_function_checker_no_order:cannot_find_match"
    assert missed.cause == "value_error:string"  # the call to the same function, not the other one's name
    assert check_ast("parallel", [AREA, SEND], truth, calls(*answer[:2])).error_type == \
        "parallel_function_checker_no_order:wrong_count"


def test_in_irrelevance_no_call_is_right():
    assert check_irrelevance("I cannot help with that.").valid
    assert check_irrelevance("").valid and check_irrelevance([]).valid and check_irrelevance(None).valid
    assert check_irrelevance([{"send": "{oops"}]).valid  # a call that does not decode is no call
    assert check_irrelevance([{"send": "[1]"}]).valid  # nor one whose arguments are no object
    called = check_irrelevance(calls(("send", {})))
    assert (called.valid, called.error_type) == (False, "irrelevance_error:decoder_success")


# --- kinds -----------------------------------------------------------------------------------------

AST_CASE = Case("parallel_1", "parallel", [{"role": "user", "content": "Send to Ana and Bo."}], [SEND],
                [{"send": {"to": ["Ana"]}}, {"send": {"to": ["Bo"]}}])
IRRELEVANT = Case("irrelevance_1", "irrelevance", [{"role": "user", "content": "Hi"}], [SEND], None)


def reply(*pairs, text=None) -> Reply:
    return Reply([Call(name, arguments if isinstance(arguments, str) else json.dumps(arguments))
                  for name, arguments in pairs], text)


@pytest.mark.parametrize(("answer", "kind"), [
    (reply(text="I sent them."), "text"),
    (reply(text=""), "text"),
    (reply(("send", {"to": "Ana"})), "fewer_calls"),
    (reply(("send", {"to": "Ana"}), ("send", {"to": "Bo"}), ("send", {"to": "Cy"})), "more_calls"),
    (reply(("mail", {"to": "Ana"}), ("send", {"to": "Bo"})), "wrong_function"),
    (reply(("send", {"to": "Ana"}), ("send", {"to": "Cy"})), "wrong_value"),
    (reply(("send", {"to": "Ana"}), ("send", {})), "missing_argument"),
    (reply(("send", {"to": "Ana"}), ("send", {"to": "Bo", "cc": "Cy"})), "unexpected_argument"),
    (reply(("send", {"to": "Ana"}), ("send", {"to": 7})), "wrong_type"),
    (reply(("send", {"to": "Ana"}), ("send", "{oops")), "bad_arguments"),
    (reply(("send", {"to": "Ana"}), ("send", {"to": "Your last answer could not be used: no"})), "leaked_text"),
    (reply(("send", {"to": "<function name>"}), ("send", {"to": "Bo"})), "leaked_text"),
])
def test_each_failure_is_counted_as_its_kind(answer, kind):
    verdict = judge(AST_CASE, answer)
    assert (verdict.correct, verdict.kind) == (False, kind)
    assert kind in KINDS and verdict.error_type


def test_a_right_answer_has_no_kind_and_irrelevance_has_its_own():
    assert judge(AST_CASE, reply(("send", {"to": "Bo"}), ("send", {"to": "ana"}))).kind is None
    assert judge(IRRELEVANT, reply(text="No function fits.")).correct
    needless = judge(IRRELEVANT, reply(("send", {"to": "x"})))
    assert (needless.correct, needless.kind, needless.error_type) == \
        (False, "needless_call", "irrelevance_error:decoder_success")


def test_leak_markers_are_a_list_to_extend(monkeypatch):
    answer = reply(("send", {"to": "Ana"}), ("send", {"to": "[[fill me in]]"}))
    assert judge(AST_CASE, answer).kind == "wrong_value"
    monkeypatch.setattr(bfcl_kinds, "LEAK_MARKERS", (*bfcl_kinds.LEAK_MARKERS, "[[fill me in]]"))
    verdict = judge(AST_CASE, answer)
    assert verdict.kind == "leaked_text" and "[[fill me in]]" in verdict.error


def test_a_server_error_fails_every_category():
    assert server_failure(AST_CASE, "HTTP 500: boom").kind == "error"
    failed = server_failure(IRRELEVANT, "HTTP 500: boom")
    assert (failed.correct, failed.kind, failed.error_type) == (False, "error", None)
