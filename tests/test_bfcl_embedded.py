"""``llmproxy bfcl`` through the real embedded model, served by llmproxy's own server for the run: a
verdict and kind come out for every case, and the record is well formed. What the model answers is
its own business, so no score is asserted."""

from __future__ import annotations

import json

import pytest
from bfcl_helpers import SAMPLE
from cli_helpers import invoke

from llmproxy.evaluation.bfcl import KINDS

pytestmark = pytest.mark.model

FIELDS = {"id", "category", "target", "face", "request", "calls", "content", "correct", "kind", "bfcl_error_type",
          "error", "status", "seconds"}


def test_two_cases_through_llmproxys_server_on_the_embedded_model(tmp_path):
    output = tmp_path / "run.jsonl"
    result = invoke("bfcl", "--data", str(SAMPLE), "--category", "simple_python", "--category", "irrelevance",
                    "--limit", "1", "--max-tokens", "32", "--retries", "0", "--output", str(output))
    assert result.exit_code in (0, 1), result.stderr  # 1 only where every case failed with an error
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [record["category"] for record in records] == ["simple_python", "irrelevance"]
    for record in records:
        assert set(record) == FIELDS
        assert record["target"].startswith("llmproxy embedded") and record["face"] == "chat"
        assert isinstance(record["correct"], bool) and record["seconds"] > 0
        assert (record["kind"] is None) == record["correct"] and (record["kind"] is None or record["kind"] in KINDS)
        assert all(set(call) == {"name", "arguments"} for call in record["calls"])
    table = [line for line in result.stdout.splitlines() if line.startswith("| simple_python") or
             line.startswith("| irrelevance")]
    assert len(table) == 2 and all("llmproxy embedded" in line for line in table)
