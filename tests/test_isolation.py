"""The suite cannot see the developer's own llmproxy setup - not a settings file where the user's goes, not
an ``LLMPROXY_*`` variable, not ~/.config/llmproxy - in the test process or in a process a test starts
(tests/conftest.py sets this up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from llmproxy.presets import load_preset, preset_names
from llmproxy.route import build_route
from llmproxy.settings import backend_defaults

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = {"max_tokens": 1, "temperature": 1.9, "stop": ["HOSTILE"], "llamacpp": {"seed": 666}}
# A request's settings as llmproxy works them out: the backend's defaults, then the user's file.
SETTINGS_OF_A_REQUEST = (
    "import json; from llmproxy.route import build_route; print(json.dumps(build_route("
    "endpoint_type='llamacpp', endpoint='http://127.0.0.1:9', context_window=4096).base_settings))"
)
SEES = "import json, os, pathlib; print(json.dumps([sorted(os.environ), str(pathlib.Path.home())]))"


def settings_of_a_request_in_a_process(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", SETTINGS_OF_A_REQUEST], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_the_tests_see_none_of_the_developers_setup():
    assert not Path(os.environ["LLMPROXY_SETTINGS"]).exists()
    assert {n for n in os.environ if n.startswith("LLMPROXY_")} <= {"LLMPROXY_SETTINGS", "LLMPROXY_UPDATE_GOLDEN",
                                                                     "LLMPROXY_UPDATE_SCREENSHOTS"}
    for config in (Path.home() / ".config", Path(os.environ["XDG_CONFIG_HOME"])):
        assert not (config / "llmproxy").exists()
    route = build_route(endpoint_type="llamacpp", endpoint="http://127.0.0.1:9", context_window=4096)
    assert route.base_settings == backend_defaults("llamacpp")
    assert all(load_preset(name).built_in for name in preset_names())
    # A process a test starts sees the same.
    assert settings_of_a_request_in_a_process(dict(os.environ)) == backend_defaults("llamacpp")
    names, home = json.loads(subprocess.run([sys.executable, "-c", SEES], capture_output=True, text=True,
                                            check=True).stdout)
    assert {n for n in names if n.startswith("LLMPROXY_")} == {n for n in os.environ if n.startswith("LLMPROXY_")}
    assert home == str(Path.home())


def test_a_hostile_developer_setup_changes_no_test(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "llmproxy").mkdir(parents=True)
    (home / ".config" / "llmproxy" / "settings.json").write_text(json.dumps(HOSTILE), encoding="utf-8")
    for folder in (home / ".config" / "llmproxy", tmp_path):  # a preset of the user's, and one on $LLMPROXY_PATH
        (folder / "settings").mkdir()
        (folder / "settings" / "deterministic.toml").write_text('description = "Hostile."\n[settings]\ntop_k = 9\n')
    named = tmp_path / "settings.json"
    named.write_text(json.dumps(HOSTILE), encoding="utf-8")
    developer = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    del developer["LLMPROXY_SETTINGS"]
    # Outside the test suite, both files change a request's settings: the setup is a real threat.
    assert settings_of_a_request_in_a_process(developer)["max_tokens"] == 1
    assert settings_of_a_request_in_a_process({**developer, "LLMPROXY_SETTINGS": str(named)})["seed"] == 666

    developer.update(LLMPROXY_SETTINGS=str(named), LLMPROXY_CONFIG=str(tmp_path / "serve.toml"),
                     LLMPROXY_API_KEY="hostile", LLMPROXY_BACKEND_KEY="hostile", LLMPROXY_DEBUG="1",
                     LLMPROXY_PATH=str(tmp_path))
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"{__file__}::test_the_tests_see_none_of_the_developers_setup"],
        env=developer, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert inner.returncode == 0 and "1 passed" in inner.stdout, inner.stdout + inner.stderr
