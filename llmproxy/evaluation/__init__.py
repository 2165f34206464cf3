"""Evaluation: requests with known right answers run through a route, and the answers scored.

    scenarios   llmproxy's own suites (``scenarios/``): one request a line, the function it should call
                or whether it should call at all
    bfcl/       the Berkeley Function Calling Leaderboard's single-turn categories, sent over HTTP to any
                OpenAI-compatible server and scored by BFCL's rules (``llmproxy.evaluation.bfcl``)

Takes a route (llmproxy.route) and a suite; gives each case's outcome and a summary per route.
"""

from llmproxy.evaluation.scenarios import (
    DECISIONS,
    Outcome,
    Scenario,
    Summary,
    builtin_scenarios_path,
    builtin_suites,
    evaluate,
    load_scenarios,
    run_scenario,
    summarise,
)

__all__ = ["DECISIONS", "Outcome", "Scenario", "Summary", "builtin_scenarios_path", "builtin_suites", "evaluate",
           "load_scenarios", "run_scenario", "summarise"]
