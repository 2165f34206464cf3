"""The test session's ground rules, and shared fixtures (a MemGPT-style conversation and MemGPT's eight
memory functions).

Ground rules, for every test and every process a test starts:
- Nothing of the developer's own setup reaches a test: ``LLMPROXY_SETTINGS`` names a file that does not
  exist, every other ``LLMPROXY_*`` variable is gone, and HOME and XDG_CONFIG_HOME are an empty folder,
  so neither ~/.config/llmproxy nor a variable can change an outcome.
- A test that uses the real model carries the ``model`` marker, so ``pytest -m "not model"`` is a fast
  loop; one that uses the model without it fails (tests/model_guard/ explains how it is noticed).

The suite runs in pytest-xdist workers (pyproject's ``addopts``), each a process of its own that runs
this file, so the rules hold in every worker; tests share a worker's expensive fixtures (the model, a
running server) and never depend on one another's order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"
SESSION_DIR = Path(tempfile.mkdtemp(prefix="llmproxy-tests-"))
EMPTY_HOME = SESSION_DIR / "home"
MISSING_SETTINGS = SESSION_DIR / "no-user-settings.json"
MODEL_USE_LOG = SESSION_DIR / "model-use.log"
# Variables of the test suite itself, not of llmproxy: they change what a run does on purpose.
TEST_SUITE_VARIABLES = {"LLMPROXY_UPDATE_GOLDEN", "LLMPROXY_UPDATE_SCREENSHOTS"}


def _isolate_from_the_developer() -> None:
    """Set the environment this process and its children see. It runs before anything imports llmproxy,
    in case a module reads a variable or a path when it is imported."""
    for name in [n for n in os.environ if n.startswith("LLMPROXY_") and n not in TEST_SUITE_VARIABLES]:
        del os.environ[name]
    (EMPTY_HOME / ".config").mkdir(parents=True)
    os.environ["LLMPROXY_SETTINGS"] = str(MISSING_SETTINGS)
    os.environ["HOME"] = str(EMPTY_HOME)
    os.environ["XDG_CONFIG_HOME"] = str(EMPTY_HOME / ".config")
    os.environ["XDG_CONFIG_DIRS"] = str(EMPTY_HOME / ".config")
    # Tests talk to servers on this machine; a developer's HTTP proxy must not carry that traffic.
    loopback = "127.0.0.1,localhost,::1"
    for name in ("NO_PROXY", "no_proxy"):
        os.environ[name] = f"{os.environ[name]},{loopback}" if os.environ.get(name) else loopback
    # Python processes the tests start report their model use (tests/model_guard/sitecustomize.py).
    guard = str(TESTS / "model_guard")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [guard, os.environ.get("PYTHONPATH")]))
    os.environ["PYTEST_MODEL_USE_LOG"] = str(MODEL_USE_LOG)


def _share_the_cores_among_workers() -> None:
    """Each pytest-xdist worker's llama.cpp gets its share of the cores, at least one (one each with three
    workers on two cores). llama.cpp's threads meet at a barrier after every step of the model and spin
    there while they wait; a thread whose partner shares a core with another worker spins away its time
    slice, and a generation ran 3-10x slower on a busy 2-core machine than on one thread. Set before
    llama_cpp (and so OpenMP) is loaded, here and in every process a test starts."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # xdist sets it before this file runs
    os.environ["OMP_THREAD_LIMIT"] = str(max(1, (os.cpu_count() or 1) // workers))


def _compile_llmproxy_once() -> None:
    """Compile llmproxy's modules before the workers start. Where PYTHONDONTWRITEBYTECODE is set (CI sets
    it), no process writes them, so each worker and each of the ~40 Python processes the tests start
    would compile the package again (a quarter of a second each); compileall writes them all the same."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller, or a run without workers
        import compileall

        compileall.compile_dir(TESTS.parent / "llmproxy", quiet=1)


_isolate_from_the_developer()
_share_the_cores_among_workers()
_compile_llmproxy_once()

import llama_cpp  # noqa: E402  (these imports follow the isolation)
from hypothesis import settings  # noqa: E402
from model_guard.model_use import watch_llama  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from llmproxy._data import PATH_ENV  # noqa: E402
from llmproxy.backends.cpu_features import load_without_amx  # noqa: E402
from llmproxy.presets import preset_files  # noqa: E402
from llmproxy.types import FunctionDefinition, Message  # noqa: E402

load_without_amx()  # the tests' own models (a reference Llama, the grammar checks') load as the backend's do


def pytest_unconfigure(config) -> None:
    shutil.rmtree(SESSION_DIR, ignore_errors=True)


# --- the model marker ------------------------------------------------------------------------

_used_the_model: set[str] = set()  # node ids of the tests during which this process used the model


def _note_model_use() -> None:
    current = os.environ.get("PYTEST_CURRENT_TEST")  # "<node id> (setup|call|teardown)"
    _used_the_model.add(current.rsplit(" ", 1)[0] if current else "")


watch_llama(llama_cpp.Llama, _note_model_use)


def _tests_that_used_the_model() -> set[str]:
    """This process's record and what the test's subprocesses wrote to the log."""
    started = MODEL_USE_LOG.read_text(encoding="utf-8").splitlines() if MODEL_USE_LOG.exists() else []
    return _used_the_model | {line.rsplit(" ", 1)[0] for line in started}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if (call.when == "call" and report.passed and item.get_closest_marker("model") is None
            and item.nodeid in _tests_that_used_the_model()):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} uses the real model (it loaded or ran llama-cpp-python's Llama, here "
                           "or in a process it started) but is not marked: add @pytest.mark.model, so that "
                           "`pytest -m \"not model\"` stays a fast loop.")
    return report


# --- the order of the run --------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that run the model first, each kept whole: they hold the longest tests, and workers,
    which take a module at a time (pyproject's ``--dist loadscope``), end together when the longest
    modules start early rather than last."""
    use_the_model = {item.path for item in items if item.get_closest_marker("model")}
    items.sort(key=lambda item: item.path not in use_the_model)  # stable: each module keeps its order


# --- shared fixtures -------------------------------------------------------------------------


def load_fixture(name: str):
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def memgpt_functions() -> list[dict]:
    return load_fixture("memgpt_functions.json")


@pytest.fixture(scope="session")
def function_definitions(memgpt_functions) -> list[FunctionDefinition]:
    return [FunctionDefinition(**f) for f in memgpt_functions]


@pytest.fixture(scope="session")
def conversation_dicts() -> list[dict]:
    return load_fixture("conversation.json")


@pytest.fixture(scope="session")
def conversation(conversation_dicts) -> list[Message]:
    return TypeAdapter(list[Message]).validate_python(conversation_dicts)


# A settings preset that sets every sampler llmproxy translates, each to a value of its own, so a
# translation that mixes two up or drops one shows.
EVERY_SAMPLER = {"temperature": 0.42, "seed": 11, "top_k": 7, "min_p": 0.07, "typical_p": 0.9, "repeat_penalty": 1.3,
                 "presence_penalty": 0.4, "frequency_penalty": 0.6, "mirostat": 2, "mirostat_tau": 6.5,
                 "mirostat_eta": 0.25}


@pytest.fixture
def write_preset(tmp_path, monkeypatch):
    """``write_preset(name, toml_text)`` puts a preset in a settings/ folder on $LLMPROXY_PATH (a user's
    own); the presets on the search path are read afresh after each write and after the test. It holds
    ``every_sampler`` (EVERY_SAMPLER) from the start."""
    folder = tmp_path / "on-path" / "settings"
    folder.mkdir(parents=True)
    monkeypatch.setenv(PATH_ENV, str(folder.parent))

    def write(name: str, text: str) -> Path:
        path = folder / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        preset_files.cache_clear()
        return path

    lines = "\n".join(f"{key} = {value}" for key, value in EVERY_SAMPLER.items())
    write("every_sampler", f'description = "Every sampler, each set to a value of its own."\n[settings]\n{lines}\n')
    yield write
    preset_files.cache_clear()


# Hypothesis draws the same examples on every run (derandomized, no example database): a failure in CI
# is one anybody can replay. bench/bench_fuzz.py draws new ones, from the seed it prints.
settings.register_profile("llmproxy", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("llmproxy")
