"""Runs at the start of every Python process a test starts: tests/conftest.py puts this folder first on
PYTHONPATH. When such a process uses the real model, it appends the test that started it (pytest's
``PYTEST_CURRENT_TEST``, inherited) to the file named by ``$PYTEST_MODEL_USE_LOG``, so conftest can fail
a test that runs the model in a subprocess without the ``model`` marker.

llama_cpp is watched as it is imported, not imported here: most subprocesses never need it, and
loading it costs every one of them time.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

from model_use import watch_llama

LOG_ENV = "PYTEST_MODEL_USE_LOG"


class _WatchLlamaOnImport(importlib.abc.MetaPathFinder):
    """Finds ``llama_cpp.llama`` the ordinary way, and watches its ``Llama`` once the module has run."""

    def __init__(self, log: str) -> None:
        self.log = log
        self.recorded = False

    def find_spec(self, name, path, target=None):
        if name != "llama_cpp.llama":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            watch_llama(module.Llama, self.record)
            # A llama-cpp-python server a test starts loads its model as llmproxy's embedded backend does.
            from llmproxy.backends.cpu_features import load_without_amx

            load_without_amx()

        spec.loader.exec_module = exec_module
        return spec

    def record(self) -> None:
        if not self.recorded:  # once per process is enough to name the test
            self.recorded = True
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(os.environ.get("PYTEST_CURRENT_TEST", "") + "\n")


def _run_the_sitecustomize_this_one_hides() -> None:
    """Python imports only the first ``sitecustomize`` on the path; a distribution's own still runs."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if os.environ.get(LOG_ENV):
    sys.meta_path.insert(0, _WatchLlamaOnImport(os.environ[LOG_ENV]))
_run_the_sitecustomize_this_one_hides()
