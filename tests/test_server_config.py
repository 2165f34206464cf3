"""Server configuration: the TOML file, routes from flags, and the ``llmproxy serve`` command."""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from server_helpers import fake_llamacpp, free_port
from typer.testing import CliRunner

from llmproxy.backends._http import Timeouts
from llmproxy.cli import app
from llmproxy.errors import ConfigurationError, ModelNotFoundError
from llmproxy.prompts import load_wrapper
from llmproxy.server.config import ConnectionLimits, RouteLimits, load_config, serving, setup

GOOD = """
[server]
port = 9123

[models.smol]
wrapper = "chatml-noforce-roles"
grammar = "none"
context_window = 2048
settings = { temperature = 0.2 }

[models.big]
backend = "llamacpp"
endpoint = "http://localhost:8080/v1"
context_window = 16384
auth_type = "bearer_token"
auth_key = "k"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmproxy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_config_file_defines_named_routes(tmp_path):
    path = write(tmp_path, GOOD)
    server, routes = setup(path, {})
    assert (server.host, server.port) == ("127.0.0.1", 9123)
    assert list(routes) == ["smol", "big"]
    smol, big = routes["smol"], routes["big"]
    wrapper = load_wrapper("chatml-noforce-roles").wrapper
    assert (smol.backend.name, smol.wrapper, smol.grammar, smol.context_window) == ("embedded", wrapper, "none", 2048)
    assert smol.settings == {"temperature": 0.2}
    assert (big.backend.name, big.backend.endpoint, big.context_window) == ("llamacpp", "http://localhost:8080", 16384)
    assert big.backend.http._client.headers["authorization"] == "Bearer k"


@pytest.mark.parametrize("text, says", [
    ("[models.a\n", "not valid TOML"),
    ("[models.a]\nwraper = 'chatml'\n", "models.a.wraper: Extra inputs are not permitted"),
    ("[models.a]\ncontext_window = 'big'\n", "models.a.context_window"),
    ("[server]\nport = 8100\n", "models: Field required"),
    ("[models]\n", "models: Dictionary should have at least 1 item"),
    ("[models.a]\nbackend = 'gpt'\n", "model 'a': unknown backend 'gpt'; choose one of: embedded, llamacpp"),
    ("[models.a]\nwrapper = 'nope'\n", "model 'a': unknown wrapper 'nope'"),
    ("[models.a]\ngrammar = 'nope'\n", "unknown grammar 'nope'; use auto, none or one of: json"),
    ("[models.a]\nsettings = { temperature = 'hot' }\n", "model 'a': setting 'temperature'"),
    ("[models.a]\nauth_type = 'magic'\n", "models.a.auth_type"),
    ("[models.a]\nmax_queue = -1\n", "models.a.max_queue: Input should be greater than or equal to 0"),
    ("[models.a]\nmax_running = 2\n", "model 'a': max_running: the embedded backend runs one generation at a time"),
    ("[models.a]\n[aliases]\n'claude-*' = 'b'\n", "aliases.'claude-*': 'b' is not one of its models (a)"),
])
def test_bad_config_files_say_what_and_where(tmp_path, text, says):
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError) as failed:
        setup(path, {})
    assert str(path) in failed.value.message and says in failed.value.message


def test_running_and_queued_limits_per_model(tmp_path):
    path = write(tmp_path, GOOD.replace('auth_key = "k"', 'auth_key = "k"\nmax_running = 4\nmax_queue = 0'))
    assert serving(path, {}).limits == {"smol": RouteLimits(max_running=1, max_queue=16),
                                        "big": RouteLimits(max_running=4, max_queue=0)}
    flagged = serving(None, {"backend": "llamacpp", "model": "m", "context_window": 64, "max_queue": 3})
    assert flagged.limits == {"m": RouteLimits(max_running=32, max_queue=3)}


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config(tmp_path / "absent.toml")


def test_flags_define_one_route():
    server, routes = setup(None, {"backend": "llamacpp", "model": "mixtral", "context_window": 4096})
    assert server.port == 8100 and list(routes) == ["mixtral"]
    _, routes = setup(None, {})
    assert list(routes) == ["embedded"] and routes["embedded"].backend.name == "embedded"
    _, routes = setup(None, {"syntax": "hermes"})  # --syntax: the call syntax of the model's own template
    assert routes["embedded"].wrapper.name == "auto" and routes["embedded"].wrapper.spec.syntax.name == "hermes"


def test_flags_and_a_config_file_do_not_mix(tmp_path):
    with pytest.raises(ConfigurationError, match="--backend, --grammar cannot be combined with a config file"):
        setup(write(tmp_path, GOOD), {"backend": "llamacpp", "grammar": "none"})


# --- the command -------------------------------------------------------------------------------


@pytest.fixture
def launched(monkeypatch):
    """What ``serve`` hands to uvicorn, instead of serving."""
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app_, **options: calls.append((app_, options)))
    return calls


def test_serve_defaults(launched, monkeypatch):
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    monkeypatch.setenv("LLMPROXY_API_KEY", "from-env")
    gc.unfreeze()
    result = CliRunner().invoke(app, ["serve", "--backend", "llamacpp", "--context-window", "4096"])
    frozen = gc.get_freeze_count()
    gc.unfreeze()  # the test process goes on; only a server keeps everything it loaded
    assert result.exit_code == 0, result.output
    assert frozen > 0  # what the server loaded is kept out of the collector's full scans
    ((served, options),) = launched
    assert (options["host"], options["port"], options["log_level"]) == ("127.0.0.1", 8100, "info")
    assert served.state.service.intake.api_key == b"from-env"
    assert list(served.state.service.models.routes) == ["llamacpp"]


def test_serve_config_from_the_environment(launched, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMPROXY_CONFIG", str(write(tmp_path, GOOD)))
    result = CliRunner().invoke(app, ["serve", "--port", "9999", "--log-level", "DEBUG"])
    assert result.exit_code == 0, result.output
    ((served, options),) = launched
    assert (options["port"], options["log_level"]) == (9999, "debug")
    assert list(served.state.service.models.routes) == ["smol", "big"]


def test_serve_browser_options(launched, monkeypatch, tmp_path):
    """The names it answers to (flags, else the file's, and always --host), and the origins allowed CORS."""
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    result = CliRunner().invoke(app, ["serve", "--backend", "llamacpp", "--context-window", "4096", "--host",
                                      "box.lan", "--allowed-host", "llm.lan", "--cors-origin", "https://chat.example"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("LLMPROXY_CONFIG", str(write(tmp_path, GOOD.replace(
        "port = 9123", "port = 9123\nallowed_hosts = ['file.lan']\ncors_origins = ['https://file.example']"))))
    assert CliRunner().invoke(app, ["serve"]).exit_code == 0
    (flagged, _), (filed, _) = launched
    for served, names, origin in ((flagged, ("box.lan", "llm.lan"), "https://chat.example"),
                                  (filed, ("file.lan",), "https://file.example")):
        with TestClient(served, base_url="http://localhost") as local:
            for name in names:
                assert local.get("/v1/models", headers={"Host": name}).status_code == 200
            assert local.get("/v1/models", headers={"Host": "other.example"}).status_code == 421
            preflight = local.options("/v1/models", headers={"Origin": origin, "Access-Control-Request-Method": "GET"})
            assert preflight.headers["access-control-allow-origin"] == origin


def test_serve_connection_limits(launched, monkeypatch, tmp_path):
    """Defaults, then the file's [server] keys, then flags over them."""
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    assert CliRunner().invoke(app, ["serve", "--backend", "llamacpp", "--context-window", "4096"]).exit_code == 0
    monkeypatch.setenv("LLMPROXY_CONFIG", str(write(tmp_path, GOOD.replace(
        "port = 9123", "port = 9123\nidle_timeout = 2.5\nheader_timeout = 3\nmax_header_bytes = 4096"))))
    result = CliRunner().invoke(app, ["serve", "--body-timeout", "7", "--max-connections", "50",
                                      "--header-timeout", "4"])
    assert result.exit_code == 0, result.output
    (_, defaults), (_, configured) = launched
    protocol = configured["http"].__self__.limits  # uvicorn is handed the guarded protocol's factory
    assert defaults["http"].__self__.limits == ConnectionLimits()
    assert defaults["timeout_keep_alive"] == 5 and configured["timeout_keep_alive"] == 2.5
    assert protocol == ConnectionLimits(idle_timeout=2.5, header_timeout=4, body_timeout=7, max_header_bytes=4096,
                                        max_connections=50)


def test_serve_queue_flags(launched, monkeypatch):
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    result = CliRunner().invoke(app, ["serve", "--backend", "llamacpp", "--context-window", "4096",
                                      "--max-running", "3", "--max-queue", "5"])
    assert result.exit_code == 0, result.output
    ((served, _),) = launched
    (lane,) = served.state.service.lanes.values()
    assert (lane.admission.max_running, lane.admission.max_queue) == (3, 5)


@pytest.mark.parametrize("arguments, says", [
    (["serve", "--backend", "gpt"], "unknown backend 'gpt'"),
    (["serve", "--max-running", "2"], "max_running: the embedded backend runs one generation at a time"),
    (["serve", "--grammar", "nope"], "unknown grammar 'nope'"),
    (["serve", "--log-level", "loud"], "--log-level must be one of"),
    (["serve", "--config", "/nonexistent.toml"], "does not exist"),
])
def test_serve_rejects_bad_options(launched, monkeypatch, arguments, says):
    monkeypatch.delenv("LLMPROXY_CONFIG", raising=False)
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2 and says in result.output
    assert not launched


def test_help_explains_every_option():
    result = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    for option in ("--config", "--backend", "--endpoint", "--model", "--wrapper", "--syntax", "--grammar", "--context-window",
                   "--host", "--port", "--api-key", "--allowed-host", "--cors-origin", "--idle-timeout",
                   "--header-timeout", "--body-timeout", "--max-connections", "--max-running", "--max-queue",
                   "--log-level"):
        assert option in result.output
    assert "Example" in result.output and "127.0.0.1" in result.output


def test_console_script_serves(tmp_path):
    """``llmproxy serve`` for real, in its own process, in front of a fake llama.cpp."""
    with fake_llamacpp() as llama:
        port = free_port()
        script = Path(sys.executable).with_name("llmproxy")
        process = subprocess.Popen([str(script), "serve", "--backend", "llamacpp", "--endpoint", llama.url,
                                    "--model", "fake", "--port", str(port)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    response = httpx.get(f"http://127.0.0.1:{port}/v1/models")
                    break
                except httpx.ConnectError:
                    assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
                    time.sleep(0.1)
            assert [m["id"] for m in response.json()["data"]] == ["fake"]
        finally:
            process.terminate()
            output = process.communicate(timeout=10)[0]
    assert "OpenAI base URL: http://127.0.0.1:" in output


def test_second_chances_and_backend_timeouts_per_model(tmp_path):
    path = write(tmp_path, GOOD.replace('auth_key = "k"', 'auth_key = "k"\nretries = 0\nconnect_timeout = 2\n'
                                                          'read_timeout = 30'))
    _, routes = setup(path, {})
    assert (routes["smol"].retries, routes["big"].retries) == (2, 0)
    assert routes["big"].backend.http.timeouts == Timeouts(connect=2, first_token=120, read=30)
    flagged = serving(None, {"backend": "llamacpp", "model": "t", "context_window": 64, "read_timeout": 7.5,
                             "first_token_timeout": 9})
    assert flagged.routes["t"].backend.ahttp.timeouts == Timeouts(connect=5, first_token=9, read=7.5)


def test_aliases_map_client_model_names_by_glob_before_the_default(tmp_path):
    """Claude Code and Codex send their own model names; a config maps them to served models."""
    from llmproxy.server.models import Models

    text = GOOD + '\n[aliases]\n"claude-*-haiku*" = "smol"\n"claude-*" = "big"\n'
    served = serving(write(tmp_path, text), {})
    models = Models(served.routes, None, served.aliases)
    assert models.route("claude-3-5-haiku-latest").name == "smol"  # the first match wins
    assert models.route("claude-sonnet-4-5").name == "big"
    assert models.route("big").name == "big" and models.route(None).name == "smol"
    with pytest.raises(ModelNotFoundError) as unknown:
        models.route("gpt-5")
    assert "known models: smol, big; aliases: claude-*-haiku*, claude-*" in unknown.value.message
    assert Models(served.routes, "big", served.aliases).route("gpt-5").name == "big"
