"""Benchmark llmproxy.repair: throughput on typical broken tool calls, the valid-JSON fast path, and
the time for each 1 MB hostile input (each must return or raise JSONRepairError well within a second).

Run: .venv/bin/python bench/bench_repair.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmproxy.errors import JSONRepairError  # noqa: E402
from llmproxy.repair import repair  # noqa: E402
from tests.hostile_json import HOSTILE  # noqa: E402

THOUGHT = "The user asked about their schedule; I should check archival memory first and then answer. " * 4
MESSAGE = 'Sure! Here is what I found: "Team sync" at 10:00, lunch with Ana at 12:30, and a dentist visit. ' * 4
VALID = json.dumps(
    {"function": "send_message", "params": {"inner_thoughts": THOUGHT, "message": MESSAGE, "request_heartbeat": False}},
    indent=2,
)
BODY = VALID[: VALID.rindex("}")]  # without the final brace

# ~1 KB outputs, each broken the way small models break them.
BROKEN = [
    BODY,  # missing closing brace
    VALID[:-60],  # cut by max_tokens inside the message
    "Sure, here you go:\n```json\n" + VALID.replace("false", "False") + "\n```",
    "<think>The user wants the schedule. I will answer.</think>\n" + VALID + "<|im_end|>",
    VALID.replace('"message": "Sure!', '"message": "Sure!').replace('\\"', '"'),  # unescaped inner quotes
    VALID.replace('"', "'").replace("'s", "s"),  # Python-style quotes
    VALID.replace('"request_heartbeat": false', '"request_heartbeat": false,') + "\n// done",
    VALID + "\n" + VALID,  # two objects back to back
    VALID.replace("\n  ", "\n  // the call\n  ", 1).replace("_", "\\_"),  # comments, \_ escapes
    '{function: "send_message", params: {message: ' + MESSAGE.replace('"', "").replace(",", ";")[:400] + "}}",
]



def timeit(fn, arg, min_time=0.5):
    n, start = 0, time.perf_counter()
    while True:
        fn(arg)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / n


def main() -> None:
    for text in BROKEN:  # every typical case must repair
        repair(text)
    sizes = sum(map(len, BROKEN)) / len(BROKEN)
    rounds, start = 0, time.perf_counter()
    while time.perf_counter() - start < 2.0:
        for text in BROKEN:
            repair(text)
        rounds += 1
    elapsed = time.perf_counter() - start
    calls = rounds * len(BROKEN)
    print(f"repair throughput: {calls / elapsed:,.0f} calls/s (mix of {len(BROKEN)} broken outputs, "
          f"{sizes:,.0f} chars on average, {elapsed / calls * 1e6:.0f} us per call)")
    for i, text in enumerate(BROKEN):
        print(f"  broken case {i}: {timeit(repair, text, 0.1) * 1e6:7.1f} us  {repair(text).repairs}")
    per = timeit(repair, VALID)
    base = timeit(json.loads, VALID)
    print(f"valid-JSON fast path: {per * 1e6:.1f} us per call "
          f"({len(VALID)} chars; json.loads alone {base * 1e6:.1f} us)")
    print("hostile 1 MB inputs:")
    worst = 0.0
    for name, text in HOSTILE.items():
        start = time.perf_counter()
        try:
            result = repair(text)
            outcome = f"returned {len(result.value)} keys"
        except JSONRepairError as exc:
            outcome = f"refused: {str(exc)[:60]}"
        took = time.perf_counter() - start
        worst = max(worst, took)
        print(f"  {name:26s} {len(text) / 1e6:4.2f} MB  {took * 1000:8.1f} ms  {outcome}")
    print(f"hostile worst case: {worst * 1000:.1f} ms")


if __name__ == "__main__":
    main()
