"""Core speed: render and parse for a MemGPT-sized request (not part of the test run).

A ~2,000-token system prompt, MemGPT's 8 functions and 20 history messages, rendered with every
wrapper; then the model's answer parsed, repaired where needed, checked and shaped as a response.
Targets: render under 1 ms, parse under 0.2 ms.

Run: .venv/bin/python bench/bench_core.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from pydantic import TypeAdapter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmproxy.calls import check_call, response_message  # noqa: E402
from llmproxy.syntaxes.memgpt import _call_json  # noqa: E402
from llmproxy.tokens import estimate_tokens  # noqa: E402
from llmproxy.types import FunctionDefinition, Message  # noqa: E402
from llmproxy.prompts import cut_at_markers, load_wrapper, wrapper_specs  # noqa: E402
from llmproxy.prompts._wrappers import _pretty  # noqa: E402


def memgpt_sized_request() -> tuple[list[Message], list[FunctionDefinition]]:
    functions = [FunctionDefinition(**f) for f in json.loads((ROOT / "tests/fixtures/memgpt_functions.json").read_text())]
    sentence = "Sam is a warm, curious companion who remembers what matters to the user and follows up on it. "
    system = "You are Sam.\n" + sentence * 100  # about 2,000 tokens
    history: list[dict] = [{"role": "system", "content": system}]
    for turn in range(5):  # 4 messages per turn -> 20 history messages
        history += [
            {"role": "user", "content": json.dumps({"type": "user_message", "message": f"Question {turn}: what did I say about hiking?", "time": "2024-01-03 10:00:00 AM"})},
            {"role": "assistant", "content": "Check memory first.", "tool_calls": [{"id": f"c{turn}", "type": "function", "function": {"name": "archival_memory_search", "arguments": json.dumps({"query": "hiking", "page": 0, "request_heartbeat": True})}}]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": json.dumps({"status": "OK", "message": "Showing 1 of 1 results: Loves the Eiger trail.", "time": "2024-01-03 10:00:01 AM"})},
            {"role": "assistant", "content": "Now answer.", "tool_calls": [{"id": f"d{turn}", "type": "function", "function": {"name": "send_message", "arguments": json.dumps({"message": "You love the Eiger trail!"})}}]},
        ]
    return TypeAdapter(list[Message]).validate_python(history), functions


def timed(fn, repeat: int) -> float:
    """Median milliseconds of ``fn`` over ``repeat`` runs (after a warm-up)."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def render(wrapper, messages, functions):
    """Shape and render, as the pipeline does for a request offering ``functions``."""
    return wrapper.render(messages, wrapper.shape(wrapper.spec.call, functions))


def main() -> None:
    messages, functions = memgpt_sized_request()
    chatml = load_wrapper("chatml").wrapper
    prompt = render(chatml, messages, functions).prompt
    cold = timed(lambda: (_pretty.cache_clear(), _call_json.cache_clear(), render(chatml, messages, functions)), 300)
    print(f"request: {len(messages)} messages, {len(functions)} functions, prompt ~{estimate_tokens(prompt)} tokens (cl100k)")
    print(f"render chatml, history never seen before  {cold:.3f} ms (median)")
    for spec in wrapper_specs():
        wrapper = load_wrapper(spec.name).wrapper
        print(f"render {spec.name:22s} (history seen before) {timed(lambda: render(wrapper, messages, functions), 300):.3f} ms (median)")

    shape = render(chatml, messages, functions).shape
    clean = ' "send_message",\n  "params": {\n    "inner_thoughts": "Reply warmly.",\n    "message": "You love the Eiger trail! Planning another trip?"\n  }\n}'
    broken = ' "send_message",\n  "params": {\n    "inner_thoughts": "Reply warmly.",\n    "message": "You love the Eiger trail! Planning another trip?",\n'

    def parse(raw: str):
        answer = shape.syntax.parse(cut_at_markers(raw, chatml.spec.stop), shape)
        calls = [check_call(call, functions, shape.allowed, raw) for call in answer.calls]
        return response_message(answer.content, calls, "tools")

    print(f"parse valid answer      {timed(lambda: parse(clean), 2000):.3f} ms (median)")
    print(f"parse truncated answer  {timed(lambda: parse(broken), 2000):.3f} ms (median)")


if __name__ == "__main__":
    main()
