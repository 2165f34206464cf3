"""BFCL, the Berkeley Function Calling Leaderboard's single-turn categories, run against any
OpenAI-compatible server and scored by BFCL's rules (written here: nothing of bfcl-eval is imported).

    data       the cases, from an installed ``bfcl-eval`` (``pip install --no-deps bfcl-eval``) or a folder
    tools      BFCL's function docs as JSON-schema tools, as its handlers convert them
    faces      one wire API each (chat, responses, messages): the request BFCL sends, the answer read back
    values     BFCL's rules for one argument: its type, and its value among the acceptable ones
    checker    BFCL's verdict on an answer: its AST checker, and no call in the irrelevance categories
    kinds      what went wrong, in kinds (text instead of a call, wrong value, leaked text ...)
    verdicts   a case's verdict: right or wrong, the kind, BFCL's error type
    runner     cases sent over HTTP one at a time and judged: ``run_cases``
    summary    results counted per category, target and face; the JSON-lines record

Takes a base URL (and a face); gives one ``CaseResult`` per case.
"""

from llmproxy.evaluation.bfcl.data import (
    AST_CATEGORIES,
    CATEGORIES,
    INSTALL_HINT,
    IRRELEVANCE_CATEGORIES,
    Case,
    load_cases,
)
from llmproxy.evaluation.bfcl.faces import FACES
from llmproxy.evaluation.bfcl.kinds import KINDS, LEAK_MARKERS
from llmproxy.evaluation.bfcl.runner import CaseResult, run_cases
from llmproxy.evaluation.bfcl.summary import Tally, tally, write_jsonl

__all__ = ["AST_CATEGORIES", "CATEGORIES", "FACES", "INSTALL_HINT", "IRRELEVANCE_CATEGORIES", "KINDS", "LEAK_MARKERS",
           "Case", "CaseResult", "Tally", "load_cases", "run_cases", "tally", "write_jsonl"]
