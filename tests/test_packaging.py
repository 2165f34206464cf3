"""The data folders ship inside the wheel and are found there, as in a source checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from llmproxy._data import data_dir

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("wrappers", "grammars", "settings", "scenarios")


def test_source_checkout_finds_the_top_level_folders():
    for kind in KINDS:
        assert data_dir(kind) == ROOT / kind


def test_wheel_ships_the_data_and_the_installed_package_finds_it(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("llmproxy-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "installed")
    for kind in KINDS:
        for path in (ROOT / kind).iterdir():
            assert f"llmproxy/data/{kind}/{path.name}" in names
    for path in (ROOT / "llmproxy/server/inspector/static").iterdir():  # the inspector page's files
        assert f"llmproxy/server/inspector/static/{path.name}" in names
    # The unpacked wheel comes first on the path, so this is the installed package, not the checkout.
    probe = ("from llmproxy._data import data_dir; from llmproxy.prompts import load_wrapper;"
             "from llmproxy.presets import load_preset;"
             "print(data_dir('wrappers')); print(load_wrapper('chatml-noforce-roles').wrapper.name);"
             "print(load_preset('deterministic_mirostat').origin)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(tmp_path / "installed"), "PATH": ""}, cwd=tmp_path)
    found, wrapper, preset = result.stdout.split()
    assert Path(found) == tmp_path / "installed" / "llmproxy" / "data" / "wrappers"
    assert wrapper == "chatml-noforce-roles"
    assert Path(preset) == tmp_path / "installed" / "llmproxy" / "data" / "settings" / "deterministic_mirostat.toml"
