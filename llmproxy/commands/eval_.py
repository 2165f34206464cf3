"""``llmproxy eval``: a scenario suite against one backend, for each wrapper with and without grammar (and
each decide mode asked for).

The scoring is ``llmproxy.evaluation``'s; this command picks the routes, shows progress and prints the
comparison. The table is Markdown, so a run pastes straight into a README or an issue.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from llmproxy.commands import _tables as tables
from llmproxy.commands import options as opt
from llmproxy.commands._console import out, progress_bar
from llmproxy.commands._errors import fail, reported
from llmproxy.evaluation import (
    Outcome,
    Summary,
    builtin_scenarios_path,
    builtin_suites,
    evaluate,
    load_scenarios,
    summarise,
)

DEFAULT_GRAMMARS = ("auto", "none")


def _count(scenarios: list) -> str:
    return f"{len(scenarios)} scenario{'' if len(scenarios) == 1 else 's'}"


def _share(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.0f}%)" if total else "0/0"


COLUMNS = ("wrapper", "grammar", "decide", "valid calls", "correct function", "right decision", "repairs needed",
           "second chance", "mean latency")


def markdown_table(summaries: list[Summary]) -> str:
    """The comparison as a Markdown table (numbers right-aligned); never wrapped, so it pastes whole.
    "right decision" counts the decision scenarios (- where the suite has none)."""
    rows = [(s.wrapper, s.grammar, s.decide, _share(s.valid, s.total), _share(s.correct, s.total),
             _share(s.decisions, s.decision_total) if s.decision_total else "-", _share(s.repaired, s.total),
             _share(s.retried, s.total), f"{s.mean_latency_s:.2f} s") for s in summaries]
    return tables.markdown_table(COLUMNS, rows, [index >= 3 for index in range(len(COLUMNS))])


def suite_path(suite: str | None) -> Path | None:
    """The scenario file ``suite`` names: a built-in suite's name (``decisions``), else a file; None: the
    built-in suite."""
    if suite is None or suite == "builtin":
        return None
    if suite in builtin_suites() and not Path(suite).exists():
        return builtin_scenarios_path(suite)
    return Path(suite)


def eval_command(
    suite: Annotated[Optional[str], typer.Argument(
        metavar="SUITE", show_default=False,
        help="A built-in suite - builtin (32 scenarios of every kind), decisions (16 under tool_choice auto: a "
             "tool needed or not, beside others) or keywords (one per schema keyword) - or a scenario file: one "
             "OpenAI chat request per line, with a 'name', 'expect' (the function that should be called, or "
             "null) and, for a decision, 'decision' (call or answer). Default: builtin.")] = None,
    wrapper: opt.Wrappers = None,
    syntax: opt.Syntax = None,
    grammar: Annotated[Optional[list[str]], typer.Option(
        "--grammar", show_default=False,
        help="Grammar mode to evaluate each wrapper with ('auto', 'none' or a grammar file name); repeat to "
             "compare. Default: both auto and none.")] = None,
    decide: opt.Decides = None,
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    model: opt.Model = None,
    context_window: opt.ContextWindow = None,
    auth_type: opt.AuthType = None,
    auth_key: opt.AuthKey = None,
    max_tokens: opt.MaxTokens = None,
    temperature: opt.Temperature = None,
    seed: opt.Seed = None,
    preset: opt.Preset = None,
    retries: opt.Retries = None,
    limit: Annotated[Optional[int], typer.Option(
        "--limit", min=1, show_default=False, help="Run only the suite's first N scenarios (a quick check).")] = None,
    json_output: Annotated[bool, typer.Option(
        "--json", help="Print the results as JSON (each configuration's summary and every scenario's outcome).")] = False,
    debug: opt.Debug = False,
) -> None:
    """Run a suite of scenario conversations for each wrapper, with and without grammar, and print a
    table: valid calls, correct function chosen, right decisions, answers that needed repairs, mean
    latency. This is how to pick a wrapper (and grammar and decide mode) for a model.

    A valid call is a call to an offered function whose arguments match its schema (for a scenario
    with tool_choice none: a plain answer; with auto: either). A right decision is, in a decision
    scenario, a call to the expected function where one is needed and a plain answer where none is.
    Exits with 1 when no configuration produced a single valid answer.

    Examples:

    \b
      llmproxy eval
      llmproxy eval decisions --grammar auto --decide free --decide choose --seed 1
      llmproxy eval --wrapper chatml --wrapper chatml-noforce --seed 1
      llmproxy eval my_suite.jsonl --backend llamacpp --endpoint http://localhost:8080 --grammar auto
      llmproxy eval --limit 5 --json > results.json
    """
    with reported(debug):
        path = suite_path(suite)
        scenarios = load_scenarios(path)[:limit]
        routes = opt.open_routes(opt.variants(wrapper, grammar or DEFAULT_GRAMMARS, decide), backend=backend, endpoint=endpoint, model=model, syntax=syntax,
                                 context_window=context_window, auth_type=auth_type, auth_key=auth_key,
                                 max_tokens=max_tokens, temperature=temperature, seed=seed, preset=preset,
                                 retries=retries)
        results: list[tuple[Summary, list[Outcome]]] = []
        with progress_bar(len(routes) * len(scenarios)) as bar:
            for route in routes:
                bar.group(f"{route.wrapper.name}, grammar {route.grammar}, decide {route.decide}: {_count(scenarios)}")
                outcomes = evaluate(scenarios, route, on_done=lambda _: bar.advance())
                results.append((summarise(outcomes, route), outcomes))
        if json_output:
            typer.echo(json.dumps({
                "suite": suite or "builtin",
                "backend": routes[0].backend.name,
                "model": routes[0].name,
                "results": [{**dataclasses.asdict(summary), "outcomes": [dataclasses.asdict(o) for o in outcomes]}
                            for summary, outcomes in results],
            }, indent=2, ensure_ascii=False))
        else:
            console = out()
            console.print(markdown_table([summary for summary, _ in results]))
            console.print(f"{_count(scenarios)} from {suite or 'the built-in suite'}; backend "
                          f"{opt.backend_label(routes[0])}", style="dim")
        if not any(summary.valid for summary, _ in results):
            first = next((o.error for _, outcomes in results for o in outcomes if o.error), "no valid answers")
            raise fail(f"no configuration produced a valid answer; the first error: {first}")
