"""A case's verdict: right or wrong by BFCL's rules, the failure's kind, and BFCL's own error type."""

from __future__ import annotations

import json
from dataclasses import dataclass

from llmproxy.evaluation.bfcl.checker import check_ast, check_irrelevance
from llmproxy.evaluation.bfcl.data import Case
from llmproxy.evaluation.bfcl.faces import Reply
from llmproxy.evaluation.bfcl.kinds import failure_kind, leaked_marker


@dataclass(frozen=True)
class Verdict:
    correct: bool
    kind: str | None = None  # llmproxy.evaluation.bfcl.kinds.KINDS; None when correct
    error_type: str | None = None  # BFCL's, as in its score files
    error: str | None = None


def judge(case: Case, reply: Reply) -> Verdict:
    """BFCL's verdict on ``reply``, and the kind of failure."""
    answer = reply.model_result()
    if case.ground_truth is None:
        check = check_irrelevance(answer)
    else:
        check = check_ast(case.category, case.functions, case.ground_truth, answer)
    if check.valid:
        return Verdict(True)
    arguments = [_decoded(call.arguments) for call in reply.calls]
    marker = leaked_marker(arguments, reply.text)
    kind = failure_kind(check, irrelevance=case.irrelevance, calls=len(reply.calls),
                        expected_calls=len(case.ground_truth or ()), leaked=marker is not None)
    error = f"{check.error} (carries {marker!r})" if marker else check.error
    return Verdict(False, kind, check.error_type, error)


def _decoded(arguments: str) -> object:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def server_failure(case: Case, message: str) -> Verdict:
    """A case the server answered with an error status, or not at all: wrong in every category. (BFCL
    records the exception as the answer's text: a failure to decode in the AST categories, and a right
    refusal in irrelevance, which this does not copy: a server that fails scores nothing.)"""
    error_type = None if case.irrelevance else "ast_decoder:decoder_failed"
    return Verdict(False, "error", error_type, message)
