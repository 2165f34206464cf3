"""BFCL's own verdicts and requests, recorded for the tests, and our checker's agreement with BFCL's.

Needs bfcl-eval's code and data (``pip install --no-deps bfcl-eval``) and nothing else of its
dependencies but two small ones its handlers' methods are wrapped in (``pip install overrides tenacity``,
in your venv only): the modules its checker and handlers import but do not use (tree-sitter, the
vendors' SDKs ...) are stubbed here, in this script only. It:

- answers every single-turn case (all ten categories) with model-like answers made from the ground
  truths by mutation (right ones, and each kind of wrong one), judges each with BFCL's own code
  (``ast_checker`` behind its evaluation runner's decoding, and its irrelevance rule) and with
  ``llmproxy.evaluation.bfcl.checker``, and prints how often the two agree;
- writes a sample of those answers with BFCL's verdicts to tests/fixtures/bfcl_agreement.jsonl (the
  cases they answer to tests/fixtures/bfcl_agreement_cases.jsonl);
- writes a few small cases per category in BFCL's layout to tests/fixtures/bfcl/, with the requests
  BFCL's chat-completions, Responses and Claude handlers send for them (requests.jsonl).

    .venv/bin/python bench/bfcl_fixtures.py            # agreement on every answer, fixtures rewritten
    .venv/bin/python bench/bfcl_fixtures.py --check    # agreement only, nothing written
"""

from __future__ import annotations

import argparse
import copy
import importlib.abc
import importlib.machinery
import json
import os
import random
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MODEL = "gpt-4o-2024-11-20-FC"  # an OpenAI FC model: BFCL maps dots in names to underscores for it
STUBBED = {"tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "filelock", "dotenv", "mistralai",
           "cohere", "google", "qwen_agent", "writerai", "boto3", "bs4", "html2text", "rank_bm25", "serpapi",
           "sentence_transformers", "faiss", "networkx", "pandas", "numpy", "huggingface_hub", "tabulate",
           "datamodel_code_generator", "mpmath", "tqdm"}


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any module of ``STUBBED`` not installed imports as a mock: BFCL's checker never calls them."""

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__ = [], spec
        return module

    def exec_module(self, module):
        pass


def _import_bfcl():
    sys.meta_path.append(_Stubs())
    config = types.ModuleType("bfcl_eval.constants.model_config")  # the real one imports every handler's SDK
    config.MODEL_CONFIG_MAPPING = {MODEL: types.SimpleNamespace(underscore_to_dot=True, is_fc_model=True)}
    sys.modules["bfcl_eval.constants.model_config"] = config
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    os.environ.setdefault("ANTHROPIC_API_KEY", "unused")
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.model_handler.api_inference.claude import ClaudeHandler
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
    from bfcl_eval.model_handler.api_inference.openai_response import OpenAIResponsesHandler
    from bfcl_eval.utils import _func_doc_language_specific_pre_processing
    return types.SimpleNamespace(Language=Language, ReturnFormat=ReturnFormat, eval_runner=eval_runner,
                                 ClaudeHandler=ClaudeHandler, OpenAICompletionsHandler=OpenAICompletionsHandler,
                                 OpenAIResponsesHandler=OpenAIResponsesHandler,
                                 _func_doc_language_specific_pre_processing=_func_doc_language_specific_pre_processing)


sys.path.insert(0, str(ROOT))
from llmproxy.evaluation.bfcl.checker import check_ast, check_irrelevance  # noqa: E402
from llmproxy.evaluation.bfcl.data import CATEGORIES, IRRELEVANCE_CATEGORIES, installed_data_dir  # noqa: E402
from llmproxy.evaluation.bfcl.tools import tool_name  # noqa: E402


# --- BFCL's verdict ------------------------------------------------------------------------------


def bfcl_verdict(bfcl, handler, entry: dict, ground_truth: list | None, category: str, answer: Any) -> dict:
    """BFCL's runner's verdict on ``answer`` (what its handler records), or {"crash": ...}."""
    try:
        if category in IRRELEVANCE_CATEGORIES:
            result = bfcl.eval_runner._evaluate_single_relevance_entry(handler, entry["id"], answer, entry, MODEL,
                                                                        category)
        else:
            result = bfcl.eval_runner._evaluate_single_ast_entry(
                handler, entry["id"], answer, ground_truth, entry, MODEL, category,
                language=bfcl.Language.PYTHON, return_format=bfcl.ReturnFormat.PYTHON)
    except Exception as exc:  # noqa: BLE001 - BFCL's checker fails on some answers; they are left out
        return {"crash": f"{type(exc).__name__}: {exc}"}
    return {"valid": result["valid"], "error_type": result.get("error_type")}


def our_verdict(entry: dict, ground_truth: list | None, category: str, answer: Any) -> dict:
    check = (check_irrelevance(answer) if ground_truth is None
             else check_ast(category, entry["function"], ground_truth, answer))
    return {"valid": check.valid, "error_type": check.error_type}


# --- model-like answers --------------------------------------------------------------------------


def _pick(values: list, rng: random.Random, first: bool) -> tuple[bool, Any]:
    """(whether to give the parameter, its value) from its acceptable values."""
    given = [value for value in values if value != ""]
    if not given or ("" in values and not first and rng.random() < 0.5):
        return False, None
    return True, copy.deepcopy(given[0] if first else rng.choice(given))


def right_calls(ground_truth: list, rng: random.Random, first: bool) -> list[tuple[str, dict]]:
    calls = []
    for expected in ground_truth:
        (name, params), = expected.items()
        arguments = {}
        for param, values in params.items():
            give, value = _pick(values, rng, first)
            if give:
                arguments[param] = value
        calls.append((tool_name(name), arguments))
    if not first:
        rng.shuffle(calls)
    return calls


def _restyled(value: Any, rng: random.Random) -> Any:
    """The same answer as a model might write it: other case and spacing, an int for a whole float."""
    if isinstance(value, str):
        return rng.choice([value.upper(), value.replace(" ", "  "), value.replace(" ", "-"), f"{value}."])
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_restyled(item, rng) for item in value]
    return value


def _other_value(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + rng.choice([1, 2.5, -1])
    if isinstance(value, str):
        return rng.choice([value + "x", "something else", value[: len(value) // 2]])
    if isinstance(value, list):
        return rng.choice([value[:-1], value[::-1], [*value, value[0]]]) if value else ["extra"]
    if isinstance(value, dict):
        if not value:
            return {"extra": 1}
        key = rng.choice(list(value))
        return rng.choice([{**value, key: _other_value(value[key], rng)}, {k: v for k, v in value.items() if k != key},
                           {**value, "extra_key": "x"}])
    return "x"


def _other_type(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return rng.choice(["true", 1])
    if isinstance(value, int):
        return rng.choice([str(value), float(value) + 0.5, [value]])
    if isinstance(value, float):
        return rng.choice([str(value), [value]])
    if isinstance(value, str):
        return rng.choice([12345, [value], {"value": value}, True])
    if isinstance(value, list):
        return rng.choice([", ".join(map(str, value)), [str(item) for item in value], {"items": value}])
    if isinstance(value, dict):
        return rng.choice([json.dumps(value), list(value.values())])
    return 1


def _some_param(calls: list, rng: random.Random, where=lambda name, param: True) -> tuple[int, str] | None:
    options = [(index, param) for index, (name, arguments) in enumerate(calls) for param in arguments
               if where(name, param)]
    return rng.choice(options) if options else None


def _value(calls: list, name: str, param: str) -> Any:
    return next(arguments[param] for call_name, arguments in calls if call_name == name and param in arguments)


def _docs(entry: dict) -> dict[str, dict]:
    return {tool_name(doc["name"]): doc for doc in entry["function"]}


def mutations(entry: dict, ground_truth: list, rng: random.Random) -> dict[str, list]:
    """Model-like answers to an AST case, by kind, as lists of (name, arguments) calls, text, or raw
    ``[{name: arguments JSON}]`` where the JSON itself is the point."""
    docs = _docs(entry)
    base = right_calls(ground_truth, rng, first=True)
    found: dict[str, Any] = {"right": base, "right_other": right_calls(ground_truth, rng, first=False),
                             "text": rng.choice(["I cannot do that.", "The answer is 42.", "Sure! Let me check."]),
                             "empty_text": "", "fewer_calls": base[:-1],
                             "more_calls": [*base, base[rng.randrange(len(base))]]}
    found["restyled"] = [(name, {p: _restyled(v, rng) for p, v in arguments.items()}) for name, arguments in base]
    others = [name for name in docs if name != base[0][0]]
    found["wrong_function"] = [(rng.choice(others) if others else "not_a_function", base[0][1]), *base[1:]]
    dotted = next((doc["name"] for doc in entry["function"] if "." in doc["name"]), None)
    if dotted and tool_name(dotted) == base[0][0]:
        found["dotted_name"] = [(dotted, base[0][1]), *base[1:]]
    for kind, change in (("wrong_value", _other_value), ("wrong_type", _other_type)):
        chosen = _some_param(base, rng)
        if chosen:
            calls = copy.deepcopy(base)
            calls[chosen[0]][1][chosen[1]] = change(calls[chosen[0]][1][chosen[1]], rng)
            found[kind] = calls
    required = lambda name, param: param in docs.get(name, {}).get("parameters", {}).get("required", [])  # noqa: E731
    for kind, where in (("missing_required", required), ("missing_other", lambda n, p: not required(n, p))):
        chosen = _some_param(base, rng, where)
        if chosen:
            calls = copy.deepcopy(base)
            del calls[chosen[0]][1][chosen[1]]
            found[kind] = calls
    chosen = _some_param(base, rng, lambda name, param: bool(_value(base, name, param)) and
                         isinstance(_value(base, name, param), list | dict))
    if chosen:  # one item of a list (or one entry of a dict) of another type
        calls = copy.deepcopy(base)
        value = calls[chosen[0]][1][chosen[1]]
        key = rng.randrange(len(value)) if isinstance(value, list) else rng.choice(list(value))
        value[key] = _other_type(value[key], rng)
        found["wrong_item_type"] = calls
    found["unexpected_argument"] = [(base[0][0], {**base[0][1], "extra_param": "x"}), *base[1:]]
    chosen = _some_param(base, rng, lambda name, param: True)
    if chosen:
        calls = copy.deepcopy(base)
        calls[chosen[0]][1][chosen[1]] = "Your last answer could not be used: answer again"
        found["leaked_text"] = calls
    found["bad_json"] = [{base[0][0]: '{"unclosed": '}]
    found["non_object"] = [{base[0][0]: "[1, 2]"}]
    return found


def irrelevance_answers(entry: dict, rng: random.Random) -> dict[str, Any]:
    docs = list(_docs(entry).items())
    found: dict[str, Any] = {"text": "I can't help with that: no function fits.", "empty_text": "",
                             "leaked_text": "Your last answer could not be used", "bad_json": None, "non_object": None}
    if docs:
        name, doc = rng.choice(docs)
        arguments = {param: "x" for param in doc["parameters"].get("required", [])}
        found.update(call=[(name, arguments)], call_no_arguments=[(name, {})],
                     bad_json=[{name: "{oops"}], non_object=[{name: '"just text"'}])
    return {kind: answer for kind, answer in found.items() if answer is not None}


def recorded(answer: Any) -> Any:
    """An answer as BFCL's handler records it: calls as ``[{name: arguments JSON}]``, text as text."""
    if isinstance(answer, list) and answer and isinstance(answer[0], tuple):
        return [{name: json.dumps(arguments)} for name, arguments in answer]
    return answer


# --- the run ---------------------------------------------------------------------------------------


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load(data: Path, category: str) -> list[tuple[dict, list | None]]:
    entries = read(data / f"BFCL_v4_{category}.json")
    if category in IRRELEVANCE_CATEGORIES:
        return [(entry, None) for entry in entries]
    answers = {line["id"]: line["ground_truth"] for line in read(data / "possible_answer" / f"BFCL_v4_{category}.json")}
    return [(entry, answers[entry["id"]]) for entry in entries]


def fc_handler(bfcl):
    return bfcl.OpenAICompletionsHandler("gpt-4o-2024-11-20", 0.001, MODEL, True)


def agreement(bfcl, data: Path) -> tuple[list[dict], dict[str, dict]]:
    """Every answer to every case, judged both ways; prints the agreement. Returns the answers and the
    cases they answer."""
    handler = fc_handler(bfcl)
    rows, cases, crashes = [], {}, Counter()
    agree, disagree = Counter(), []
    for category in CATEGORIES:
        for entry, ground_truth in load(data, category):
            rng = random.Random(entry["id"])
            answers = (irrelevance_answers(entry, rng) if ground_truth is None
                       else mutations(entry, ground_truth, rng))
            cases[entry["id"]] = {"id": entry["id"], "category": category, "function": entry["function"],
                                  "ground_truth": ground_truth}
            for mutation, answer in answers.items():
                answer = recorded(answer)
                theirs = bfcl_verdict(bfcl, handler, copy.deepcopy(entry), copy.deepcopy(ground_truth), category,
                                      copy.deepcopy(answer))
                if "crash" in theirs:
                    crashes[theirs["crash"].split(":")[0]] += 1
                    continue
                ours = our_verdict(entry, ground_truth, category, answer)
                same = ours == theirs
                agree[same] += 1
                if not same:
                    disagree.append((entry["id"], mutation, theirs, ours))
                rows.append({"id": entry["id"], "category": category, "mutation": mutation, "answer": answer,
                             "valid": theirs["valid"], "error_type": theirs["error_type"]})
    total = agree[True] + agree[False]
    print(f"agreement with BFCL's checker: {agree[True]}/{total} answers ({100 * agree[True] / total:.2f}%), "
          f"verdict and error type alike; {sum(crashes.values())} answers BFCL's checker could not judge "
          f"(left out): {dict(crashes)}")
    for case_id, mutation, theirs, ours in disagree[:20]:
        print(f"  {case_id} {mutation}: BFCL {theirs}, ours {ours}")
    return rows, cases


def _size(case: dict) -> int:
    return len(json.dumps(case["function"])) + len(json.dumps(case["ground_truth"]))


def agreement_sample(rows: list[dict], cases: dict[str, dict], per_category: int, seed: int = 7) -> tuple[list, list]:
    """Answers to ``per_category`` small cases of each category, every mutation of each, and at least one
    answer of each error type BFCL gave anywhere."""
    rng = random.Random(seed)
    chosen: set[str] = set()
    for category in CATEGORIES:
        ids = sorted({row["id"] for row in rows if row["category"] == category}, key=lambda i: _size(cases[i]))
        chosen.update(rng.sample(ids[: max(per_category * 4, 1)], min(per_category, len(ids))))
    kept = [row for row in rows if row["id"] in chosen]
    seen = {(row["category"], row["error_type"]) for row in kept}
    for row in sorted(rows, key=lambda r: _size(cases[r["id"]])):
        if (row["category"], row["error_type"]) not in seen:
            seen.add((row["category"], row["error_type"]))
            chosen.add(row["id"])
            kept.append(row)
    return kept, [cases[i] for i in sorted(chosen)]


def write_jsonl(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")


def bfcl_requests(bfcl, entry: dict, category: str) -> dict[str, dict]:
    """The keyword arguments each BFCL handler passes to its SDK for ``entry`` (the model's name aside)."""
    sent: dict[str, dict] = {}
    for face, handler_class, model in (("chat", bfcl.OpenAICompletionsHandler, "gpt-4o-2024-11-20"),
                                       ("responses", bfcl.OpenAIResponsesHandler, "gpt-4o-2024-11-20"),
                                       ("messages", bfcl.ClaudeHandler, "claude-haiku-4-5-20251001")):
        handler = handler_class(model, 0.001, f"{model}-FC", True)

        def capture(face=face, **kwargs):
            sent[face] = json.loads(json.dumps(kwargs, default=str))
            raise StopIteration

        handler.generate_with_backoff = capture
        test_entry = copy.deepcopy(entry)  # as BFCL's generation loads it: the Python hint added
        test_entry["function"] = bfcl._func_doc_language_specific_pre_processing(test_entry["function"], category)
        try:
            handler.inference_single_turn_FC(test_entry, False)
        except StopIteration:
            pass
        sent[face].pop("model")
        sent[face].pop("timeout", None)
    return sent


def _features(entry: dict) -> set[str]:
    """What of BFCL's format a case shows: the types of its parameters (nested ones too), dotted names,
    roles and turns beyond one user message."""
    found = {f"role:{message['role']}" for message in entry["question"][0]}
    if len(entry["question"][0]) > 1:
        found.add("several messages")

    def walk(properties: dict, where: str) -> None:
        for schema in properties.values():
            found.add(f"{where}{schema.get('type')}")
            if "properties" in schema:
                walk(schema["properties"], "nested ")
            items = schema.get("items", {})
            found.add(f"items {items.get('type')}") if items else None
            walk(items.get("properties", {}), "item ")

    for doc in entry["function"]:
        found.update({"dotted name"} if "." in doc["name"] else set())
        walk(doc["parameters"].get("properties", {}), "")
    return found


def _covering(pairs: list, count: int, most_chars: int = 2500) -> list:
    """``count`` small cases (``most_chars`` of JSON at most, where there are enough) that between them
    show as much of the format as they can: each in turn the one that shows the most the others do
    not, the smallest of those."""
    small = [pair for pair in pairs if len(json.dumps(pair[0])) <= most_chars]
    pairs = sorted(small if len(small) >= count else pairs, key=lambda pair: len(json.dumps(pair[0])))
    chosen: list = []
    seen: set[str] = set()
    for _ in range(count):
        rest = [pair for pair in pairs if pair not in chosen]
        pick = max(rest, key=lambda pair: len(_features(pair[0]) - seen))  # max keeps the first (smallest) of ties
        chosen.append(pick)
        seen |= _features(pick[0])
    return sorted(chosen, key=lambda pair: pair[0]["id"])


def write_sample(bfcl, data: Path, per_category: int) -> None:
    """A few small cases of each category in BFCL's layout, covering its format (``_covering``), with
    BFCL's requests for them."""
    folder = FIXTURES / "bfcl"
    (folder / "possible_answer").mkdir(parents=True, exist_ok=True)
    requests = []
    for category in CATEGORIES:
        pairs = _covering(load(data, category), per_category)
        write_jsonl(folder / f"BFCL_v4_{category}.json", [entry for entry, _ in pairs])
        if category not in IRRELEVANCE_CATEGORIES:
            write_jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json",
                        [{"id": entry["id"], "ground_truth": truth} for entry, truth in pairs])
        requests.extend({"id": entry["id"], **bfcl_requests(bfcl, entry, category)} for entry, _ in pairs)
    write_jsonl(folder / "requests.jsonl", requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print the agreement only; write nothing")
    parser.add_argument("--cases", type=int, default=3, help="cases per category in the agreement fixture")
    parser.add_argument("--sample", type=int, default=3, help="cases per category in tests/fixtures/bfcl/")
    args = parser.parse_args()
    data = installed_data_dir()
    if data is None:
        sys.exit("bfcl-eval is not installed: pip install --no-deps bfcl-eval")
    bfcl = _import_bfcl()
    rows, cases = agreement(bfcl, data)
    if args.check:
        return
    kept, kept_cases = agreement_sample(rows, cases, args.cases)
    write_jsonl(FIXTURES / "bfcl_agreement.jsonl", kept)
    write_jsonl(FIXTURES / "bfcl_agreement_cases.jsonl", kept_cases)
    print(f"wrote {len(kept)} answers to {len(kept_cases)} cases to tests/fixtures/bfcl_agreement.jsonl")
    write_sample(bfcl, data, args.sample)
    print(f"wrote {args.sample} cases per category and BFCL's requests for them to tests/fixtures/bfcl/")


if __name__ == "__main__":
    main()
