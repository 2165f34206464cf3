"""The ``model`` marker's guard (tests/conftest.py, tests/model_guard/) holds in a pytest-xdist worker, as
the suite runs: a test that uses the real model without the marker fails, whether it uses it in its
worker or in a process it starts, and a marked test or one that never touches the model passes.

The guard runs here on a few probe tests, in a copy of the suite's conftest.py and model_guard/. The
probes construct llama-cpp-python's ``Llama`` on a file that does not exist: the guard counts the
attempt as a use (it notices before the weights would load), and no weights are read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TESTS = Path(__file__).parent
USE_THE_MODEL = ("import llama_cpp\n"
                 "try:\n    llama_cpp.Llama(model_path='/nonexistent/model.gguf', verbose=False)\n"
                 "except ValueError:\n    pass\n")
PROBES = f'''
import subprocess
import sys

import pytest

USE_THE_MODEL = {USE_THE_MODEL!r}


def test_unmarked_use_in_the_worker():
    exec(USE_THE_MODEL)


def test_unmarked_use_in_a_process_it_starts():
    subprocess.run([sys.executable, "-c", USE_THE_MODEL], check=True)


@pytest.mark.model
def test_marked_use():
    exec(USE_THE_MODEL)
    subprocess.run([sys.executable, "-c", USE_THE_MODEL], check=True)


def test_no_use():
    pass
'''


def test_an_unmarked_test_that_uses_the_model_fails_in_a_worker(tmp_path):
    suite = tmp_path / "tests"
    suite.mkdir()
    shutil.copy(TESTS / "conftest.py", suite)
    shutil.copytree(TESTS / "model_guard", suite / "model_guard", ignore=shutil.ignore_patterns("__pycache__"))
    (suite / "test_probes.py").write_text(PROBES, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = model: uses the real model\n", encoding="utf-8")
    # A run of its own, as a developer starts one: none of this run's guard or pytest variables.
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_", "PYTHONPATH"))}
    report = tmp_path / "report.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1",
                          f"--junitxml={report}", "tests"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert report.exists(), run.stdout + run.stderr
    cases = {case.get("name"): case for case in ElementTree.parse(report).iter("testcase")}
    assert sorted(cases) == ["test_marked_use", "test_no_use", "test_unmarked_use_in_a_process_it_starts",
                             "test_unmarked_use_in_the_worker"], run.stdout
    for name in ("test_unmarked_use_in_the_worker", "test_unmarked_use_in_a_process_it_starts"):
        failure = cases[name].find("failure")
        assert failure is not None and "uses the real model" in failure.get("message", "") + (failure.text or ""), (
            name, run.stdout)
    for name in ("test_marked_use", "test_no_use"):
        assert cases[name].find("failure") is None and cases[name].find("error") is None, (name, run.stdout)
    assert "1 worker" in run.stdout, run.stdout  # the probes ran in a worker
