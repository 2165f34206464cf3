"""Real clients end to end: Codex CLI (`codex exec`, over /v1/responses) and Claude Code (`claude -p`,
over /v1/messages) run one tool loop each through `llmproxy serve` (not part of the test run).

    .venv/bin/python bench/e2e_clients.py [--clients codex,claude] [--parallel] [--wrapper qwen3 --think] [--help]

1. Installs the pinned clients from the npm registry into ~/.cache/llmproxy-e2e/ (outside the tree;
   $LLMPROXY_E2E_CACHE moves it), with --ignore-scripts: both ship their native binary as an npm
   optional dependency, so nothing is fetched from anywhere but the registry.
2. Then, where it can (root, or user namespaces), runs the rest in a network namespace of its own with
   only the loopback device up: the clients cannot reach anything but 127.0.0.1.
3. Starts the scripted llama.cpp server (bench/scripted_backend.py) in-process, streaming a token every
   --pace seconds, `llmproxy serve --backend llamacpp --wrapper hermes` (an API key set) in front of
   it, and a recording relay (bench/counting_relay.py) in front of llmproxy, which the clients are
   pointed at.
4. Runs each client in an empty work dir with a config and home of its own. The scripted model writes
   a line of text and a call to the client's shell tool (Codex: exec_command; Claude Code: Bash) with a
   command that writes a marker to marker.txt; once the command's output comes back in a prompt, it
   answers with a final marker. A client passes when it exits 0, marker.txt holds the marker, and its
   output holds the final marker. --parallel makes it two calls at once, --think adds reasoning.
5. Prints a report (versions, exit codes, what ran, requests to llmproxy and to the backend, whether
   each stream kept the event order its SDK relies on, time) and exits 1 if a client failed.
   Everything a run saw (each exchange with llmproxy, each prompt the backend got, llmproxy's log, the
   clients' output) is kept in the run folder it names (the last 5 runs are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from counting_relay import Relay  # noqa: E402
from scripted_backend import Running, Script  # noqa: E402

CODEX = ("@openai/codex", "0.169.0")
CLAUDE = ("@anthropic-ai/claude-code", "2.1.328")
CACHE = Path(os.environ.get("LLMPROXY_E2E_CACHE", Path.home() / ".cache" / "llmproxy-e2e"))
INSIDE = "LLMPROXY_E2E_ISOLATED"  # set in the re-run inside the network namespace
PROMPT = "Use the shell tool to run the command that writes marker.txt, then report what it printed."
RUNS_KEPT = 5


# --- 1. the clients, from the npm registry ---------------------------------------------------------------


def npm_install(package: str, version: str, folder: Path) -> None:
    """``package@version`` into ``folder``/node_modules, unless it is there already."""
    manifest = folder / "node_modules" / package / "package.json"
    if manifest.exists() and json.loads(manifest.read_text())["version"] == version:
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is needed to install the clients (apt-get install npm)")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"installing {package}@{version} into {folder} ...", flush=True)
    subprocess.run([npm, "install", "--prefix", str(folder), "--ignore-scripts", "--no-audit", "--no-fund",
                    "--loglevel", "error", f"{package}@{version}"], check=True, timeout=900)


def native_binary(folder: Path, package: str, name: str) -> Path:
    """The client's native executable, from the platform package npm installed beside the wrapper."""
    scope, base = package.split("/")
    found = [path for path in (folder / "node_modules" / scope).glob(f"{base}-*/**/{name}")
             if path.is_file() and os.access(path, os.X_OK)]
    if not found:
        sys.exit(f"no native {name} binary came with {package} (an unsupported platform?)")
    return min(found, key=lambda path: len(path.parts))


def install_clients(which: list[str]) -> dict[str, Path]:
    """{client: its executable}: Codex through its node launcher (it puts the bundled rg and bwrap on
    PATH), Claude Code's native binary itself (its postinstall, skipped, only copies that file)."""
    executables = {}
    if "codex" in which:
        folder = CACHE / f"codex-{CODEX[1]}"
        npm_install(*CODEX, folder)
        native_binary(folder, CODEX[0], "codex")
        executables["codex"] = folder / "node_modules" / ".bin" / "codex"
    if "claude" in which:
        folder = CACHE / f"claude-code-{CLAUDE[1]}"
        npm_install(*CLAUDE, folder)
        executables["claude"] = native_binary(folder, CLAUDE[0], "claude")
    return executables


# --- 2. a network namespace with loopback only ---------------------------------------------------------


def isolate(argv: list[str], script: Path = Path(__file__)) -> None:
    """Re-run ``script`` (this one unless told) in a new network namespace (only ``lo``, brought up) and
    exit with its status; returns if that is not possible here, or already done."""
    if os.environ.get(INSIDE) or not (shutil.which("unshare") and shutil.which("ip")):
        return
    flags = ["--net"] if os.geteuid() == 0 else ["--net", "--map-root-user"]
    probe = subprocess.run(["unshare", *flags, "--", "ip", "link", "set", "lo", "up"], capture_output=True)
    if probe.returncode != 0:
        print("note: no network namespace here (unshare failed); the clients keep the host's network", flush=True)
        return
    command = ["unshare", *flags, "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
               sys.executable, str(script.resolve()), *argv]
    sys.exit(subprocess.run(command, env={**os.environ, INSIDE: "1"}).returncode)


# --- 3. processes ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_group(process: subprocess.Popen) -> None:
    """End ``process`` and whatever it left in its process group: TERM, then KILL after 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            process.poll()  # reaps the leader, so that an empty group reads as gone
            try:
                os.killpg(process.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.1)


def wait_healthy(url: str, key: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llmproxy exited with {process.returncode} before answering /health")
        request = urllib.request.Request(url + "/health", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"llmproxy did not answer /health within {timeout:.0f} s")


# --- 4. the clients' runs -----------------------------------------------------------------------------------


def codex_config(base_url: str, n_ctx: int) -> str:
    return textwrap.dedent(f"""\
        model = "local"
        model_provider = "llmproxy"
        model_context_window = {n_ctx}
        check_for_update_on_startup = false

        [features]
        plugins = false        # the curated-plugins sync reaches GitHub and chatgpt.com at start-up

        [analytics]
        enabled = false

        [model_providers.llmproxy]
        name = "llmproxy"
        base_url = "{base_url}/v1"
        wire_api = "responses"
        env_key = "LLMPROXY_API_KEY"
        """)


def client_command(client: str, executable: Path, run: Path, base_url: str, key: str, n_ctx: int,
                   codex_sandbox: str, extra_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of one client's run; its config and home live under ``run``."""
    home = run / f"{client}-home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb",
           "NO_COLOR": "1"}
    if client == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(codex_config(base_url, n_ctx))
        env |= {"CODEX_HOME": str(codex_home), "LLMPROXY_API_KEY": key}
        sandbox = (["--dangerously-bypass-approvals-and-sandbox"] if codex_sandbox == "none"
                   else ["--sandbox", codex_sandbox])
        return [str(executable), "exec", "--skip-git-repo-check", *sandbox, PROMPT], with_extra(env, extra_env)
    env |= {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": key,
            "CLAUDE_CONFIG_DIR": str(home / ".claude"), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    return [str(executable), "-p", PROMPT, "--allowedTools", "Bash"], with_extra(env, extra_env)


def with_extra(env: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``env`` with ``extra`` over it; an empty value removes the variable."""
    merged = env | extra
    return {name: value for name, value in merged.items() if value != ""}


def version_of(executable: Path, home: Path) -> str:
    try:
        out = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", ""), "HOME": str(home),
                                  "CODEX_HOME": str(home / ".codex")}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.strip().splitlines()[0] if out.strip() else "?"


@dataclass
class Outcome:
    client: str
    version: str
    exit_code: int | None = None  # None: killed at the timeout
    marker_written: bool = False
    final_printed: bool = False
    proxy_requests: list[str] = field(default_factory=list)  # "METHOD /path -> status"
    backend_requests: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)  # the script's step for each /completion
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    stream_problems: list[str] = field(default_factory=list)  # streams out of their SDK's order

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and self.marker_written and self.final_printed


def run_client(client: str, executable: Path, run: Path, relay: Relay, script: Script, key: str, n_ctx: int,
               timeout: float, codex_sandbox: str, extra_env: dict[str, str]) -> Outcome:
    work = run / f"{client}-work"
    work.mkdir()
    argv, env = client_command(client, executable, run, f"http://127.0.0.1:{relay.port}", key, n_ctx,
                               codex_sandbox, extra_env)
    outcome = Outcome(client, version_of(executable, Path(env["HOME"])))
    relay.reset()
    backend_seen, log_seen = len(script.requests), len(script.log)
    started = time.monotonic()
    with open(run / f"{client}.stdout", "wb") as stdout, open(run / f"{client}.stderr", "wb") as stderr:
        process = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                   start_new_session=True)
        try:
            outcome.exit_code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            outcome.notes.append(f"killed after {timeout:.0f} s")
        finally:
            stop_group(process)
    outcome.seconds = time.monotonic() - started
    marker_file = work / "marker.txt"
    outcome.marker_written = marker_file.exists() and marker_file.read_text().strip() == script.marker
    if script.parallel:
        second = work / "marker2.txt"
        outcome.marker_written &= second.exists() and second.read_text().strip() == script.second_marker
    printed = (run / f"{client}.stdout").read_text(errors="replace")
    outcome.final_printed = script.final in printed
    exchanges = relay.exchanges()
    outcome.proxy_requests = [f"{e.method} {e.target} -> {e.status}" for e in exchanges]
    outcome.backend_requests = script.requests[backend_seen:]
    outcome.completions = [entry["step"] for entry in script.log[log_seen:]]
    with open(run / f"{client}.exchanges.jsonl", "w") as out:
        for exchange in exchanges:
            out.write(json.dumps(exchange.summary(), ensure_ascii=False) + "\n")
    with open(run / f"{client}.backend.jsonl", "w") as out:
        for entry in script.log[log_seen:]:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    for exchange in exchanges:
        for problem in stream_problems(exchange.method, exchange.path,
                                       exchange.response_headers.get("content-type", ""), exchange.response_body):
            outcome.stream_problems.append(f"{exchange.method} {exchange.target}: {problem}")
        if exchange.status is None or exchange.status >= 400:
            body = exchange.response_body.decode("utf-8", "replace")[:300]
            outcome.notes.append(f"{exchange.method} {exchange.target} -> {exchange.status}: {body}")
    if not outcome.final_printed and outcome.exit_code is not None:
        tail = (run / f"{client}.stderr").read_text(errors="replace").strip().splitlines()[-3:]
        outcome.notes.extend(f"stderr: {line[:300]}" for line in tail)
    return outcome


def sse_events(body: bytes) -> list[tuple[str | None, dict]]:
    """(event name, data) of each SSE event in a recorded response body."""
    events = []
    for block in body.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        name = next((line[6:].strip() for line in block.split("\n") if line.startswith("event:")), None)
        data = "".join(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
        if data:
            try:
                events.append((name, json.loads(data)))
            except ValueError:
                events.append((name, {"type": "<not JSON>"}))
    return events


def stream_problems(method: str, path: str, content_type: str, body: bytes) -> list[str]:
    """Where a streamed /v1/responses or /v1/messages answer strays from the order its SDK relies on."""
    if method != "POST" or "text/event-stream" not in content_type:
        return []
    events = sse_events(body)
    kinds = [data.get("type") for _, data in events]
    problems = [f"event name {name!r} but type {data.get('type')!r}" for name, data in events
                if name is not None and name != data.get("type")]
    if path == "/v1/responses":
        terminal = {"response.completed", "response.incomplete", "response.failed"}
        if kinds[:1] != ["response.created"]:
            problems.append(f"first event is {kinds[:1]}, not response.created")
        numbers = [data.get("sequence_number") for _, data in events]
        if numbers != list(range(len(events))):
            problems.append(f"sequence_number runs {numbers[:3]}..., not 0, 1, 2, ...")
        if sum(kind in terminal for kind in kinds) != 1 or kinds[-1:] and kinds[-1] not in terminal:
            problems.append("not exactly one terminal event, at the end")
        added = [data.get("output_index") for _, data in events if data.get("type") == "response.output_item.added"]
        if added != list(range(len(added))):
            problems.append(f"output_item.added indices {added}")
    elif path == "/v1/messages":
        kinds = [kind for kind in kinds if kind != "ping"]
        if kinds[:1] != ["message_start"] or kinds[-1:] != ["message_stop"]:
            problems.append(f"starts with {kinds[:1]} and ends with {kinds[-1:]}")
        started = [data.get("index") for _, data in events if data.get("type") == "content_block_start"]
        stopped = [data.get("index") for _, data in events if data.get("type") == "content_block_stop"]
        if started != list(range(len(started))) or stopped != started:
            problems.append(f"block starts {started}, stops {stopped}")
        if not any(data.get("type") == "message_delta" and "output_tokens" in (data.get("usage") or {})
                   for _, data in events):
            problems.append("no message_delta with usage.output_tokens")
    return problems


# --- 5. the report -------------------------------------------------------------------------------------------


def counted(lines: list[str]) -> str:
    return ", ".join(f"{count}x {line}" if count > 1 else line for line, count in Counter(lines).items()) or "none"


def report(outcomes: list[Outcome], isolated: bool, run: Path, options: argparse.Namespace, seconds: float) -> None:
    traits = (("text before its call", bool(options.preamble)), ("two calls at once", options.parallel),
              ("thinks first", options.think))
    model = ", ".join(name for name, on in traits if on)
    print()
    print(f"llmproxy e2e with real clients: llmproxy serve --backend llamacpp --wrapper {options.wrapper} over a "
          f"scripted llama.cpp (n_ctx {options.n_ctx}{'; ' + model if model else ''}); "
          f"network: {'own namespace, loopback only' if isolated else 'host'}")
    for o in outcomes:
        print(f"\n  {o.client}: {o.version} -> {'PASS' if o.passed else 'FAIL'}")
        print(f"    exit code       {o.exit_code if o.exit_code is not None else 'killed (timeout)'}")
        print(f"    command ran     {'yes (marker.txt holds the marker)' if o.marker_written else 'no'}")
        print(f"    final printed   {'yes' if o.final_printed else 'no'}")
        print(f"    to llmproxy     {len(o.proxy_requests)}: {counted(o.proxy_requests)}")
        print(f"    to the backend  {len(o.backend_requests)}: {counted(o.backend_requests)}")
        print(f"    script steps    {counted(o.completions)}")
        print(f"    stream shape    {'; '.join(dict.fromkeys(o.stream_problems)) or 'as the SDKs expect'}")
        print(f"    wall time       {o.seconds:.1f} s")
        for note, count in Counter(o.notes).items():
            print(f"    note            {note}" + (f" ({count} times)" if count > 1 else ""))
    verdict = "PASS" if outcomes and all(o.passed for o in outcomes) else "FAIL"
    print(f"\n{verdict} in {seconds:.1f} s; everything the run saw is in {run}")


def new_run(runs: Path) -> Path:
    """A fresh folder under ``runs`` for what this run sees; only the last RUNS_KEPT are kept."""
    runs.mkdir(parents=True, exist_ok=True)
    run = runs / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run.mkdir()
    for old in sorted(runs.iterdir())[:-RUNS_KEPT]:
        shutil.rmtree(old, ignore_errors=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="codex,claude", help="which to run: codex, claude or both (default)")
    parser.add_argument("--llmproxy", default=str(ROOT / ".venv" / "bin" / "llmproxy"),
                        help="the llmproxy command (split as a shell would)")
    parser.add_argument("--n-ctx", type=int, default=32768, help="the context the scripted llama.cpp reports")
    parser.add_argument("--pace", type=float, default=0.01,
                        help="seconds between the tokens the scripted backend streams (0: all at once)")
    parser.add_argument("--preamble", default="I will run the command first.\n",
                        help="text the scripted model writes before its call ('' for none)")
    parser.add_argument("--parallel", action="store_true",
                        help="the scripted model makes two calls at once (the second writes marker2.txt)")
    parser.add_argument("--think", action="store_true",
                        help="the scripted model reasons in <think> tags first (use with --wrapper qwen3)")
    parser.add_argument("--wrapper", default="hermes", help="llmproxy's wrapper: one with hermes calls (hermes, qwen3)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each client may take")
    parser.add_argument("--codex-sandbox", default="workspace-write",
                        choices=["workspace-write", "danger-full-access", "none"],
                        help="codex exec's sandbox: 'none' bypasses sandbox and approvals (where bwrap cannot run)")
    parser.add_argument("--no-isolate", action="store_true", help="keep the host's network (no namespace)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for both clients (repeat for more; NAME= removes one), "
                             "e.g. ANTHROPIC_MODEL=local")
    options = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in options.env if "=" in item)
    which = [name.strip() for name in options.clients.split(",") if name.strip()]
    if not which or set(which) - {"codex", "claude"}:
        parser.error("--clients takes codex, claude or codex,claude")

    executables = install_clients(which)
    if not options.no_isolate:
        isolate(sys.argv[1:])
    isolated = bool(os.environ.get(INSIDE))

    started = time.monotonic()
    run = new_run(CACHE / "runs")
    key = "e2e-" + secrets.token_hex(8)
    script = Script(preamble=options.preamble, parallel=options.parallel, think=options.think)
    backend = Running(script, n_ctx=options.n_ctx, pace=options.pace)
    port = free_port()
    proxy_log = open(run / "llmproxy.log", "wb")
    proxy = subprocess.Popen([*shlex.split(options.llmproxy), "serve", "--backend", "llamacpp",
                              "--endpoint", backend.url, "--wrapper", options.wrapper, "--port", str(port),
                              "--first-token-timeout", "60"],
                             env={**os.environ, "LLMPROXY_API_KEY": key}, cwd=run, stdin=subprocess.DEVNULL,
                             stdout=proxy_log, stderr=subprocess.STDOUT, start_new_session=True)
    relay = None
    outcomes = []
    try:
        wait_healthy(f"http://127.0.0.1:{port}", key, proxy, 60)
        relay = Relay(port)
        for client in which:
            outcomes.append(run_client(client, executables[client], run, relay, script, key, options.n_ctx,
                                       options.timeout, options.codex_sandbox, extra_env))
    except RuntimeError as error:
        print(f"error: {error}; llmproxy's log: {run / 'llmproxy.log'}")
    finally:
        stop_group(proxy)
        proxy_log.close()
        if relay is not None:
            relay.stop()
        backend.stop()
    report(outcomes, isolated, run, options, time.monotonic() - started)
    sys.exit(0 if outcomes and len(outcomes) == len(which) and all(o.passed for o in outcomes) else 1)


if __name__ == "__main__":
    main()
