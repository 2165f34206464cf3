"""The real MemGPT agent (pymemgpt 0.3.25) end to end, one `llmproxy serve` its LLM and embedding endpoint.

On the embedded SmolLM2-135M, the agent holds a conversation, keeps a fact in archival memory, finds it
again and edits its core memory (not part of the test run).

    .venv/bin/python bench/e2e_memgpt.py [--steps model,script] [--wrapper NAME] [--threads 1] [--help]

1. Makes MemGPT's venv in ~/.cache/llmproxy-e2e/memgpt-0.3.25/ (outside the tree; $LLMPROXY_E2E_CACHE
   moves it), once: pymemgpt and the packages it really imports, pinned, with --no-deps (pymemgpt pins a
   lancedb the registry no longer has, and pulls in much it never imports). Only PyPI is used.
2. Then, where it can (root, or user namespaces), runs the rest in a network namespace of its own with
   only the loopback device up: neither MemGPT nor llmproxy can reach anything but 127.0.0.1.
3. Starts `llmproxy serve` (the embedded model, an API key set, LLMPROXY_SETTINGS=/nonexistent so that no
   user settings apply, llama.cpp on --threads threads) and a recording relay (bench/counting_relay.py) in
   front of it; reads the model's context length and embedding dimension from /v1/models.
4. Writes MemGPT's own ~/.memgpt/config and ~/.memgpt/credentials into a fresh HOME in the run folder:
   model_endpoint_type and embedding_endpoint_type `openai`, both at the relay's /v1, with that context
   and dimension; archival memory in Chroma (MemGPT's default), recall memory in SQLite.
5. Runs bench/memgpt_driver.py with MemGPT's Python, that HOME and nothing else of this environment: it
   creates an agent through MemGPT's Python API, sends it four user messages (each meant to lead to one
   function: send_message, archival_memory_insert, archival_memory_search, core_memory_replace), and then
   calls the memory functions itself through the agent's own function table (three inserts, a search
   whose first result must be the fact, a core-memory replace that must be saved).
6. Checks every exchange on the wire: each chat completion a 200 in OpenAI's shape whose tool calls name
   a tool the request offered with arguments that are a JSON object valid for its schema, each
   embedding a 200 with one finite vector of the model's dimension per input.
7. Prints each step (what was sent, what the agent did, the requests it made, its time) and exits 1 if
   the agent could not be created, a script-driven step failed, or any exchange was malformed. A
   model-driven step the model gets wrong (a 135M model often picks another function or odd arguments)
   is reported as the model's, not as a failure, once its exchanges were well formed. Everything the run
   saw (each exchange, MemGPT's output and state, llmproxy's log) stays in the run folder it names (the
   last 5 runs are kept).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import secrets
import shlex
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from counting_relay import Exchange, Relay  # noqa: E402
from e2e_clients import CACHE, INSIDE, free_port, isolate, new_run, stop_group, wait_healthy  # noqa: E402

MEMGPT = "0.3.25"
# What pymemgpt 0.3.25 needs on this path and nothing else (found by importing and running it with
# --no-deps), at versions that work together: chromadb 0.5.0 (0.5.23 changes the query results MemGPT's
# Chroma connector reads), llama-index-core 0.10.64 (0.10.68 downloads NLTK data at import), SQLAlchemy
# 2.0.31 (SQLAlchemy-Utils 0.41 fails to import on 2.1).
REQUIREMENTS = (
    "annotated-types==0.8.0", "anyio==3.7.1", "backoff==2.2.1", "certifi==2026.7.22", "charset-normalizer==3.3.2",
    "chroma-hnswlib==0.7.3", "chromadb==0.5.0", "click==8.5.0", "colorama==0.4.6", "dataclasses-json==0.6.7",
    "demjson3==3.0.6", "Deprecated==1.3.1", "distro==1.9.0", "docstring-parser==0.15", "fastapi==0.104.1",
    "fsspec==2026.9.0", "googleapis-common-protos==1.56.4", "grpcio==1.66.1", "h11==0.16.0", "httpcore==1.0.9",
    "httpx-sse==0.4.3", "httpx==0.25.2", "idna==3.20", "importlib_metadata==8.4.0", "importlib_resources==6.4.5",
    "jiter==0.5.0", "llama-index-core==0.10.64", "llama-index-embeddings-openai==0.1.11", "marshmallow==3.26.2",
    "monotonic==1.6", "mypy_extensions==1.1.0", "nltk==3.8.1", "numpy==1.26.4", "onnxruntime==1.19.0",
    "openai==1.40.8", "opentelemetry-api==1.27.0", "opentelemetry-exporter-otlp-proto-common==1.27.0",
    "opentelemetry-exporter-otlp-proto-grpc==1.27.0", "opentelemetry-proto==1.27.0", "opentelemetry-sdk==1.27.0",
    "opentelemetry-semantic-conventions==0.48b0", "overrides==7.7.0", "packaging==26.3", "pandas==3.0.6",
    "posthog==3.5.0", "prettytable==3.18.0", "prompt-toolkit==3.0.36", "protobuf==3.20.0",
    "pydantic-settings==2.15.0", "pydantic==2.13.5", "pydantic_core==2.46.5", f"pymemgpt=={MEMGPT}", "PyPika==0.48.9",
    "python-dateutil==2.9.0.post0", "python-dotenv==1.2.4", "pytz==2023.4", "PyYAML==6.0.3", "questionary==2.0.1",
    "regex==2026.9.29", "requests==2.34.2", "rich==13.9.4", "six==1.17.0", "sniffio==1.3.1",
    "sqlalchemy-json==0.7.0", "SQLAlchemy-Utils==0.41.2", "SQLAlchemy==2.0.31", "sqlmodel==0.0.16",
    "starlette==0.27.0", "tenacity==8.5.0", "tiktoken==0.5.2", "tokenizers==0.20.3", "tqdm==4.70.1", "typer==0.9.4",
    "typing-inspect==0.9.0", "typing-inspection==0.4.4", "typing_extensions==4.16.0", "urllib3==2.8.0",
    "wcwidth==0.9.1", "wrapt==1.17.3", "zipp==4.1.0",
)
IMPORTS = ("import memgpt.client.client, memgpt.agent_store.chroma, memgpt.agent_store.db, memgpt.embeddings, "
           "llama_index.embeddings.openai, chromadb.api.segment")


# --- 1. MemGPT's venv, from PyPI ----------------------------------------------------------------------------


def memgpt_python(python: str) -> Path:
    """MemGPT's venv's interpreter, made (or remade, when REQUIREMENTS changed) from ``python``."""
    folder = CACHE / f"memgpt-{MEMGPT}"
    interpreter = folder / "bin" / "python"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    installed = folder / "requirements.txt"  # written last: its presence says the venv is whole
    if installed.exists() and installed.read_text() == wanted and interpreter.exists():
        return interpreter
    print(f"installing pymemgpt {MEMGPT} and {len(REQUIREMENTS) - 1} packages into {folder} ...", flush=True)
    subprocess.run([python, "-m", "venv", "--clear", str(folder)], check=True)
    (folder / "requested.txt").write_text(wanted)
    subprocess.run([str(interpreter), "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                    "-r", str(folder / "requested.txt")], check=True, timeout=1800)
    with tempfile.TemporaryDirectory() as home:  # importing MemGPT makes its ~/.memgpt
        check = subprocess.run([str(interpreter), "-c", IMPORTS], capture_output=True, text=True,
                               env=bare_env(Path(home)))
    if check.returncode != 0:
        sys.exit(f"MemGPT's venv does not import: {check.stderr.strip().splitlines()[-1:]}")
    installed.write_text(wanted)
    return interpreter


def bare_env(home: Path) -> dict[str, str]:
    """The environment MemGPT runs in: nothing of this one but PATH."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "ANONYMIZED_TELEMETRY": "False"}  # Chroma's product telemetry off


def tiktoken_cache(interpreter: Path) -> Path:
    """Where llama-index-core (in MemGPT's venv) keeps tiktoken's cl100k_base: MemGPT counts tokens with it
    when it summarises, and tiktoken would download it from openaipublic unless pointed there."""
    found = sorted(interpreter.parent.parent.glob("lib/python3*/site-packages/llama_index/core/_static/tiktoken_cache"))
    if not found:
        sys.exit(f"no tiktoken cache in llama-index-core beside {interpreter}")
    return found[0]


# --- 4. MemGPT's configuration --------------------------------------------------------------------------------


def write_memgpt_config(home: Path, base_url: str, key: str, context: int, dimensions: int) -> None:
    """~/.memgpt/config and credentials as `memgpt configure` writes them, llmproxy for both endpoints."""
    folder = home / ".memgpt"
    folder.mkdir(parents=True)
    (folder / "config").write_text(textwrap.dedent(f"""\
        [defaults]
        preset = memgpt_chat
        persona = sam_pov
        human = basic

        [model]
        model = smollm2
        model_endpoint = {base_url}
        model_endpoint_type = openai
        context_window = {context}

        [embedding]
        embedding_endpoint_type = openai
        embedding_endpoint = {base_url}
        embedding_model = smollm2
        embedding_dim = {dimensions}
        embedding_chunk_size = 300

        [archival_storage]
        type = chroma
        path = {folder / "chroma"}

        [recall_storage]
        type = sqlite
        path = {folder}

        [metadata_storage]
        type = sqlite
        path = {folder}

        [version]
        memgpt_version = {MEMGPT}

        [client]
        anon_clientid = 00000000-0000-0000-0000-000000000000
        """))
    (folder / "credentials").write_text(f"[openai]\nauth_type = bearer_token\nkey = {key}\n")


def model_facts(base_url: str, key: str) -> dict:
    request = urllib.request.Request(base_url + "/models", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"][0]


# --- 6. the wire ----------------------------------------------------------------------------------------------


@dataclass
class Checked:
    """One exchange on the wire, read and checked."""

    exchange: Exchange
    kind: str  # chat, embeddings, other
    summary: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        e = self.exchange
        return e.answered_at - e.sent_at if e.answered_at and e.sent_at else None


def json_of(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


def check_chat(exchange: Exchange) -> Checked:
    import jsonschema

    checked = Checked(exchange, "chat")
    request, answer = exchange.request_json() or {}, json_of(exchange.response_body)
    tools = {tool["function"]["name"]: tool["function"].get("parameters") or {}
             for tool in request.get("tools") or [] if isinstance(tool, dict) and "function" in tool}
    if exchange.status != 200 or not isinstance(answer, dict):
        checked.problems.append(f"status {exchange.status}: {exchange.response_body[:300]!r}")
        return checked
    choices = answer.get("choices")
    if answer.get("object") != "chat.completion" or not isinstance(choices, list) or len(choices) != 1:
        checked.problems.append(f"not one chat.completion choice: {str(answer)[:300]}")
        return checked
    message = choices[0].get("message") or {}
    calls = message.get("tool_calls") or []
    said = []
    for call in calls:
        function = call.get("function") or {}
        name, arguments = function.get("name"), json_of((function.get("arguments") or "").encode())
        if call.get("type") != "function" or not call.get("id"):
            checked.problems.append(f"tool call without type function and an id: {call}")
        if name not in tools:
            checked.problems.append(f"called {name!r}, not among the {len(tools)} tools offered")
        elif not isinstance(arguments, dict):
            checked.problems.append(f"{name}'s arguments are not a JSON object: {function.get('arguments')!r}")
        else:
            errors = [error.message for error in jsonschema.Draft7Validator(tools[name]).iter_errors(arguments)]
            checked.problems.extend(f"{name}'s arguments break its schema: {error}" for error in errors)
        said.append(f"{name}({function.get('arguments')})")
    if message.get("content"):
        said.insert(0, f"content {message['content']!r}")
    usage = answer.get("usage") or {}
    checked.summary = (f"{len(tools)} tools, tool_choice {request.get('tool_choice')!r}, "
                       f"{usage.get('prompt_tokens')} prompt tokens -> {choices[0].get('finish_reason')}: "
                       + ("; ".join(said) or "no content, no call"))
    return checked


def vector_of(embedding: object) -> list[float] | None:
    """A float list, or the base64 of little-endian float32s (what OpenAI's SDK asks for)."""
    if isinstance(embedding, list):
        return embedding
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return None


def check_embeddings(exchange: Exchange, dimensions: int) -> Checked:
    checked = Checked(exchange, "embeddings")
    request, answer = exchange.request_json() or {}, json_of(exchange.response_body)
    inputs = request.get("input")
    count = len(inputs) if isinstance(inputs, list) and not all(isinstance(i, int) for i in inputs) else 1
    if exchange.status != 200 or not isinstance(answer, dict):
        checked.problems.append(f"status {exchange.status}: {exchange.response_body[:300]!r}")
        return checked
    data = answer.get("data") or []
    if len(data) != count or [item.get("index") for item in data] != list(range(count)):
        checked.problems.append(f"{len(data)} vectors for {count} inputs")
    for item in data:
        vector = vector_of(item.get("embedding"))
        if vector is None or len(vector) != dimensions or not all(math.isfinite(x) for x in vector):
            checked.problems.append(f"vector {item.get('index')}: not {dimensions} finite floats")
    shown = inputs if isinstance(inputs, str) else inputs[0] if count == 1 and isinstance(inputs, list) else inputs
    checked.summary = (f"{count} input(s) {str(shown)[:70]!r}, {request.get('encoding_format', 'float')} -> "
                       f"{len(data)} x {dimensions} floats, {(answer.get('usage') or {}).get('prompt_tokens')} tokens")
    return checked


def check(exchange: Exchange, dimensions: int) -> Checked:
    if exchange.method == "POST" and exchange.path == "/v1/chat/completions":
        return check_chat(exchange)
    if exchange.method == "POST" and exchange.path == "/v1/embeddings":
        return check_embeddings(exchange, dimensions)
    checked = Checked(exchange, "other", f"{exchange.method} {exchange.target} -> {exchange.status}")
    if exchange.status != 200:
        checked.problems.append(f"{exchange.method} {exchange.target} -> {exchange.status}")
    return checked


# --- 7. the report ------------------------------------------------------------------------------------------


def clip(text: object, width: int = 150) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def transcript(returned: object) -> list[str]:
    """What the agent did, from the messages MemGPT's client gave back."""
    if not isinstance(returned, list):
        return [clip(returned)] if returned is not None else []
    lines = []
    for message in returned:
        for key, label in (("internal_monologue", "thinks"), ("function_call", "calls"),
                           ("assistant_message", "says"), ("function_return", "returns"), ("internal_error", "error")):
            if isinstance(message, dict) and message.get(key) is not None:
                status = f" ({message['status']})" if key == "function_return" else ""
                lines.append(f"{label}{status} {clip(message[key], 130)}")
    return lines


def step_verdict(step: dict, wire: list[Checked]) -> str:
    if step["ok"]:
        return "ok"
    if step["kind"] == "model" and wire and not any(c.problems for c in wire):
        wrong = step["error"] or f"it called {', '.join(step['called']) or 'no function'}, not {step['expected']}"
        return f"the model's ({clip(wrong, 110)}); every exchange well formed"
    return f"FAILED: {step['error']}"


def report(steps: list[dict], wire: list[Checked], facts: dict, run: Path, isolated: bool, seconds: float,
           options: argparse.Namespace) -> bool:
    print(f"\nMemGPT {MEMGPT} end to end through one `llmproxy serve` ({facts.get('id')}: context "
          f"{facts.get('context_length')}, {facts['llmproxy']['capabilities'].get('embedding_dimensions')}-dim "
          f"embeddings; wrapper {options.wrapper or facts['llmproxy'].get('wrapper')}; {options.threads} thread(s)); "
          f"network: {'own namespace, loopback only' if isolated else 'host'}")
    placed: set[int] = set()
    for step in steps:
        mine = [c for c in wire if c.exchange.sent_at and step["started"] <= c.exchange.sent_at <= step["ended"]]
        placed.update(id(c) for c in mine)
        print(f"\n  [{step['kind']}] {step['name']}: {step_verdict(step, mine)}  ({step['seconds']:.1f} s)")
        print(f"    sent      {clip(step['sent'])}")
        for line in transcript(step.get("returned")):
            print(f"    agent     {line}")
        for c in mine:
            took = f"{c.seconds:.2f} s" if c.seconds is not None else "?"
            e = c.exchange
            print(f"    wire      {e.method} {e.path} {e.status} {took}: {clip(c.summary, 170)}")
            for problem in c.problems:
                print(f"    PROBLEM   {clip(problem, 200)}")
    others = [c for c in wire if id(c) not in placed]
    if others:
        print("\n  outside the steps: " + ", ".join(f"{c.exchange.method} {c.exchange.path} {c.exchange.status}"
                                                for c in others))
    chats = [c for c in wire if c.kind == "chat"]
    vectors = [c for c in wire if c.kind == "embeddings"]
    problems = [p for c in wire for p in c.problems]
    model_steps = [s for s in steps if s["kind"] == "model"]
    script_steps = [s for s in steps if s["kind"] == "script"]
    expected_steps = (1 + 4 * ("model" in options.steps) + 5 * ("script" in options.steps))
    print(f"\n  model-driven   {sum(s['ok'] for s in model_steps)} of {len(model_steps)} steps did what was asked")
    print(f"  script-driven  {sum(s['ok'] for s in script_steps)} of {len(script_steps)} steps worked")
    for name, group in (("chat", chats), ("embeddings", vectors)):
        times = sorted(c.seconds for c in group if c.seconds is not None)
        if times:
            print(f"  {name:<14} {len(group)} requests, {sum(times):.1f} s in all, "
                  f"median {times[len(times) // 2]:.2f} s, slowest {times[-1]:.2f} s")
    print(f"  wire problems  {len(problems)}")
    passed = (len(steps) == expected_steps and all(s["ok"] for s in script_steps) and not problems
              and bool(chats or "model" not in options.steps))
    print(f"\n{'PASS' if passed else 'FAIL'} in {seconds:.1f} s; everything the run saw is in {run}")
    return passed


# --- main ------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="model,script",
                        help="model (the model picks the functions), script (the script calls them) or both (default)")
    parser.add_argument("--wrapper", default="", help="llmproxy's --wrapper (default: llmproxy's own default)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (OMP_THREAD_LIMIT); default 1")
    parser.add_argument("--max-chaining", type=int, default=1,
                        help="model calls each user message may chain after its first (heartbeats); default 1")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds MemGPT's run may take")
    parser.add_argument("--llmproxy", default=str(ROOT / ".venv" / "bin" / "llmproxy"),
                        help="the llmproxy command (split as a shell would)")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python (3.10 to 3.12) MemGPT's venv is made with; default this one")
    parser.add_argument("--no-isolate", action="store_true", help="keep the host's network (no namespace)")
    options = parser.parse_args()
    if not set(options.steps.split(",")) <= {"model", "script"}:
        parser.error("--steps takes model, script or model,script")

    interpreter = memgpt_python(options.python)
    if not options.no_isolate:
        isolate(sys.argv[1:], Path(__file__))
    isolated = bool(os.environ.get(INSIDE))

    started = time.monotonic()
    run = new_run(CACHE / "memgpt-runs")
    key = "e2e-" + secrets.token_hex(8)
    port = free_port()
    wrapper = ["--wrapper", options.wrapper] if options.wrapper else []
    proxy_log = open(run / "llmproxy.log", "wb")
    proxy = subprocess.Popen([*shlex.split(options.llmproxy), "serve", "--port", str(port), *wrapper],
                             env={**os.environ, "LLMPROXY_API_KEY": key, "LLMPROXY_SETTINGS": "/nonexistent",
                                  "OMP_THREAD_LIMIT": str(options.threads)},
                             cwd=run, stdin=subprocess.DEVNULL, stdout=proxy_log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    relay, steps, wire, facts = None, [], [], {}
    try:
        wait_healthy(f"http://127.0.0.1:{port}", key, proxy, 120)
        relay = Relay(port)
        base_url = f"http://127.0.0.1:{relay.port}/v1"
        facts = model_facts(base_url, key)
        dimensions = facts["llmproxy"]["capabilities"]["embedding_dimensions"]
        home = run / "home"
        write_memgpt_config(home, base_url, key, facts["context_length"], dimensions)
        env = bare_env(home) | {"TIKTOKEN_CACHE_DIR": str(tiktoken_cache(interpreter))}
        print(f"MemGPT runs in {home}; its output goes to {run / 'memgpt.log'}", flush=True)
        with open(run / "memgpt.log", "wb") as log:
            driver = subprocess.Popen([str(interpreter), str(HERE / "memgpt_driver.py"), str(run / "steps.jsonl"),
                                       "--steps", options.steps, "--max-chaining", str(options.max_chaining)],
                                      cwd=run, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            try:
                driver.wait(options.timeout)
            except subprocess.TimeoutExpired:
                print(f"MemGPT's run was stopped after {options.timeout:.0f} s")
            finally:
                stop_group(driver)
        recorded = run / "steps.jsonl"
        steps = [json.loads(line) for line in recorded.read_text().splitlines()] if recorded.exists() else []
        wire = [check(exchange, dimensions) for exchange in relay.exchanges()]
        with open(run / "exchanges.jsonl", "w") as out:
            for c in wire:
                out.write(json.dumps(c.exchange.summary() | {"seconds": c.seconds, "problems": c.problems},
                                     ensure_ascii=False) + "\n")
    except (RuntimeError, OSError, KeyError) as error:
        print(f"error: {error}; llmproxy's log: {run / 'llmproxy.log'}")
    finally:
        stop_group(proxy)
        proxy_log.close()
        if relay is not None:
            relay.stop()
    passed = bool(facts) and report(steps, wire, facts, run, isolated, time.monotonic() - started, options)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
