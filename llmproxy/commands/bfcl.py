"""``llmproxy bfcl``: the Berkeley Function Calling Leaderboard's single-turn categories against any
OpenAI-compatible server (``--base-url``) and against llmproxy routes served here for the run, scored by
BFCL's rules (``llmproxy.evaluation.bfcl``), side by side in one Markdown table.

A route is served by llmproxy's own HTTP server, started in this process on a free port of 127.0.0.1,
so every case takes the path a client's request takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Optional

import typer

from llmproxy.commands import _tables as tables
from llmproxy.commands import options as opt
from llmproxy.commands._console import out, progress_bar
from llmproxy.commands._errors import fail, reported
from llmproxy.evaluation.bfcl import CATEGORIES, KINDS, CaseResult, Tally, load_cases, run_cases, tally, write_jsonl
from llmproxy.evaluation.bfcl.faces import check_faces
from llmproxy.evaluation.bfcl.runner import DEFAULT_TIMEOUT, resolve_model
from llmproxy.route import Route


@dataclass(frozen=True)
class Target:
    label: str
    base_url: str
    model: str | None
    api_key: str | None


def _routes(variants: list[tuple[str | None, str | None, str | None]], **options) -> dict[str, tuple[str, Route]]:
    """Model name -> (label, route) for each wrapper x grammar x decide asked for."""
    routes = opt.open_routes(variants, **options)
    return {f"bfcl-{number}": (f"llmproxy {opt.backend_label(route)} {route.wrapper.name}, grammar {route.grammar}, "
                               f"decide {route.decide}", route) for number, route in enumerate(routes, 1)}


@contextmanager
def _output(path: Path | None) -> Iterator[IO[str] | None]:
    if path is None:
        yield None
        return
    try:
        stream = path.open("w", encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {path}: {exc.strerror or exc}", 2) from None
    with stream:
        yield stream


def results_table(tallies: list[Tally]) -> str:
    """Per category, target and face: right answers, the count of each failure kind that occurs, and the
    mean time a case."""
    kinds = [kind for kind in KINDS if any(t.kinds[kind] for t in tallies)]
    header = ["category", "target", "face", "correct", "%", *(kind.replace("_", " ") for kind in kinds), "mean s"]
    rows = [[t.category, t.target, t.face, f"{t.correct}/{t.total}", f"{100 * t.share:.1f}",
             *(str(t.kinds[kind]) for kind in kinds), f"{t.mean_seconds:.2f}"] for t in tallies]
    return tables.markdown_table(header, rows, [index >= 3 for index in range(len(header))])


def bfcl(
    category: Annotated[Optional[list[str]], typer.Option(
        "--category", show_default=False,
        help=f"A BFCL category to run; repeat for several. One of {', '.join(CATEGORIES)}. "
             "Default: all of them.")] = None,
    limit: Annotated[Optional[int], typer.Option(
        "--limit", min=1, show_default=False,
        help="Run N cases of each category, drawn with --seed (the same N and seed draw the same cases). "
             "Default: every case.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="The seed of the --limit sample.")] = 0,
    data: Annotated[Optional[Path], typer.Option(
        "--data", show_default=False,
        help="A folder of BFCL's files (BFCL_v4_<category>.json and possible_answer/). Default: the "
             "installed bfcl-eval's (pip install --no-deps bfcl-eval).")] = None,
    face: Annotated[Optional[list[str]], typer.Option(
        "--face", show_default=False,
        help="The API the cases are sent through: chat (/v1/chat/completions), responses (/v1/responses) or "
             "messages (Anthropic's /v1/messages); repeat to compare. Default: chat.")] = None,
    base_url: Annotated[Optional[list[str]], typer.Option(
        "--base-url", show_default=False,
        help="An OpenAI-compatible server to score, as OpenAI's clients take it; repeat for several. "
             "Example: --base-url http://127.0.0.1:8080/v1 (llama-server --jinja)")] = None,
    api_key: Annotated[Optional[str], typer.Option(
        "--api-key", envvar="LLMPROXY_BFCL_API_KEY", show_default=False,
        help="The --base-url servers' API key; also read from $LLMPROXY_BFCL_API_KEY.")] = None,
    model: Annotated[Optional[str], typer.Option(
        "--model", show_default=False,
        help="The model name sent to --base-url servers (default: the first their /models lists), and the "
             "backend's model of the llmproxy route (as for 'serve').")] = None,
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    wrapper: opt.Wrappers = None,
    syntax: opt.Syntax = None,
    grammar: Annotated[Optional[list[str]], typer.Option(
        "--grammar", show_default=False,
        help="Grammar mode to evaluate each wrapper with ('auto', 'none' or a grammar file name); repeat to "
             "compare. Default: the wrapper's setting, else auto.")] = None,
    decide: opt.Decides = None,
    context_window: opt.ContextWindow = None,
    auth_type: opt.AuthType = None,
    auth_key: opt.AuthKey = None,
    max_tokens: opt.MaxTokens = None,
    retries: opt.Retries = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=1, help="Seconds one answer may take before the case counts as an error.")] = DEFAULT_TIMEOUT,
    output: Annotated[Optional[Path], typer.Option(
        "--output", show_default=False,
        help="Write every case to this JSON-lines file as it is judged: id, category, target, face, the "
             "request in short, the answer's calls and text, the verdict, its kind, BFCL's error type, "
             "seconds.")] = None,
    debug: opt.Debug = False,
) -> None:
    """Score a model on BFCL, the Berkeley Function Calling Leaderboard: its single-turn categories
    (simple, multiple, parallel, parallel multiple, irrelevance; the same for the live ones), sent as
    BFCL's own function-calling handlers send them, judged by BFCL's rules.

    Targets: each --base-url (any OpenAI-compatible server: a backend's own tool calling, a hosted
    API), and an llmproxy route (the backend options, as for 'serve') served here for the run: the
    route runs when no --base-url is given, or when a backend option is. Prints a Markdown table per
    category, target and face: right answers, the count of each kind of failure, the mean seconds a
    case. In the irrelevance categories no call is right: read them with the others.

    Examples:

    \b
      llmproxy bfcl --limit 5
      llmproxy bfcl --category simple_python --category irrelevance --limit 20 --seed 1 --output runs.jsonl
      llmproxy bfcl --base-url http://127.0.0.1:8080/v1 --backend llamacpp --endpoint http://127.0.0.1:8080
      llmproxy bfcl --limit 10 --face chat --face responses --face messages
    """
    with reported(debug):
        faces = list(dict.fromkeys(face or ["chat"]))
        check_faces(faces)
        cases = load_cases(category, data, limit=limit, seed=seed)
        route_options = (backend, endpoint, wrapper, syntax, grammar, decide, context_window, auth_type, auth_key,
                         max_tokens, retries)
        # Each server is asked for its model first: a wrong URL stops the run before a model loads.
        targets = [Target(url, url, resolve_model(url, api_key, model), api_key) for url in base_url or []]
        with ExitStack() as stack, _output(output) as record:
            if not base_url or any(option is not None for option in route_options):
                routes = _routes(opt.variants(wrapper, grammar or [None], decide), backend=backend,
                                 endpoint=endpoint, model=model, syntax=syntax, context_window=context_window,
                                 auth_type=auth_type, auth_key=auth_key, max_tokens=max_tokens, retries=retries)
                from llmproxy.server.background import serving_in_background  # the web framework: only to serve

                served = stack.enter_context(serving_in_background({name: route for name, (_, route) in
                                                                    routes.items()}))
                targets += [Target(label, served, name, None) for name, (label, _) in routes.items()]
            results = _run(cases, targets, faces, timeout, record)
        console = out()
        console.print(results_table(tally(results)))
        categories = ", ".join(dict.fromkeys(case.category for case in cases))
        console.print(f"{len(cases)} BFCL cases ({categories})" + (f", {limit} a category drawn with seed {seed}"
                                                                  if limit else ""), style="dim")
        if results and all(result.kind == "error" for result in results):
            raise fail(f"every case failed with an error; the first: {results[0].error}")


def _run(cases: list, targets: list[Target], faces: list[str], timeout: float,
         record: IO[str] | None) -> list[CaseResult]:
    results: list[CaseResult] = []

    def done(result: CaseResult) -> None:
        bar.advance()
        if record is not None:
            write_jsonl([result], record)
            record.flush()

    with progress_bar(len(cases) * len(targets) * len(faces)) as bar:
        for target in targets:
            for face in faces:
                bar.group(f"{target.label}, {face}: {len(cases)} cases")
                results += run_cases(cases, target.base_url, face=face, model=target.model, api_key=target.api_key,
                                     target=target.label, timeout=timeout, on_done=done)
    return results
