"""The MemGPT side of bench/e2e_memgpt.py: runs inside MemGPT's own venv (pymemgpt 0.3.25), with HOME
pointing at a folder whose ~/.memgpt/config and ~/.memgpt/credentials name llmproxy as both the LLM and
the embedding endpoint (not part of the test run; e2e_memgpt.py writes those files and starts it).

    python memgpt_driver.py OUT.jsonl [--steps model,script] [--max-chaining N]

It drives the real agent through MemGPT's own Python API (``memgpt.create_client()``, MemGPT's server
in-process) and writes one JSON line per step to OUT.jsonl as soon as the step ends. Model and script
steps alternate, feature by feature (talk, archival insert, archival search, core memory edit):

- model steps: a user message sent with ``client.user_message``; the model picks the functions. The
  step passes when the function it was meant to lead to ran without an error (send_message for plain
  talk), and the search when its first result is the fact (or the model's own note of it).
- script steps: the same memory functions called through the agent's own function table, exactly as
  MemGPT calls them for a model (``agent.functions_python[name](self=agent, **args)``), so that
  archival memory and core memory are exercised whatever the model chooses (the script's inserts come
  before the model's search, so there is a fact to find); archival memory embeds through llmproxy
  either way. The search passes when the fact ranks above the two other passages the script kept,
  the edit when MemGPT saved it.

Each line: name, kind, sent, returned, expected, called, ok, error, started/ended (time.time(), so
that the parent can match the requests its relay recorded), seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any

# The user's messages, each meant to lead to one function (and, for the search, to find the fact).
GREETING = "Hi! My name is Ada and I live in Lisbon."
SAVE = "Please save this in your archival memory: I am allergic to peanuts."
SEARCH = "Search your archival memory for what I am allergic to."
CORRECTION = "Correction: I live in Porto, not Lisbon. Update your core memory about me."
FACT = "Ada is allergic to peanuts."
QUERY = "What is Ada allergic to?"
DISTRACTORS = ["Ada's favourite colour is green.", "Ada works as a structural engineer."]
NEW_HUMAN = "Name: Ada. Lives in Porto."


def functions_called(messages: list[Any]) -> tuple[list[str], list[str]]:
    """(names of the functions that ran, errors they returned) from the client's message list."""
    called, errors = [], []
    for message in messages:
        if isinstance(message, dict) and "function_call" in message:
            called.append(str(message["function_call"]).split("(", 1)[0])
        if isinstance(message, dict) and message.get("status") == "error":
            errors.append(str(message.get("function_return")))
        if isinstance(message, dict) and "internal_error" in message:
            errors.append(str(message["internal_error"]))
    return called, errors


def ranked(returned: str) -> list[str]:
    """The passages of an archival_memory_search result ("Showing 3 of 3 results (page 0/0): [...]"), best
    first; none for any other text."""
    if not returned.startswith("Showing ") or ": [" not in returned:
        return []
    return json.loads(returned.split(": ", 1)[1])


class Steps:
    """Writes each step's record as it ends."""

    def __init__(self, path: str) -> None:
        self.out = open(path, "w", encoding="utf-8")

    def run(self, name: str, kind: str, sent: Any, expected: str | None, action) -> Any:
        started = time.time()
        record: dict[str, Any] = {"name": name, "kind": kind, "sent": sent, "expected": expected}
        result = None
        try:
            result, record["returned"], record["called"], errors, record["ok"] = action()
            record["error"] = "; ".join(errors) or None
        except Exception as error:  # a step's failure is reported, and the next step still runs
            record.update(returned=None, called=[], ok=False, error=f"{type(error).__name__}: {error}",
                          traceback=traceback.format_exc(limit=6))
        record.update(started=started, ended=time.time(), seconds=round(time.time() - started, 2))
        self.out.write(json.dumps(record, default=str) + "\n")
        self.out.flush()
        print(f"  {name}: {'ok' if record['ok'] else 'FAILED'} in {record['seconds']:.1f} s", flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="where the step records go (JSON lines)")
    parser.add_argument("--max-chaining", type=int, default=1,
                        help="model calls a user message may chain after its first (heartbeats); default 1")
    parser.add_argument("--steps", default="model,script", help="which steps run: model, script or both (default)")
    options = parser.parse_args()

    import memgpt
    from memgpt import create_client

    steps = Steps(options.out)

    def create():
        client = create_client()  # the LocalClient: MemGPT's server in-process, configured by ~/.memgpt/config
        client.server.max_chaining_steps = options.max_chaining  # bounds each message's heartbeat chain
        agent_state = client.create_agent(name="e2e")
        facts = {"memgpt": memgpt.__version__, "agent_id": str(agent_state.id), "tools": list(agent_state.tools),
                 "llm_config": vars(agent_state.llm_config), "embedding_config": vars(agent_state.embedding_config)}
        return (client, agent_state), facts, [], [], True

    made = steps.run("create agent", "script", "client.create_agent(name='e2e')", None, create)
    if made is None:
        sys.exit(1)
    client, agent_state = made

    def agent():
        return client.server._get_or_load_agent(user_id=client.user_id, agent_id=agent_state.id)

    kinds = options.steps.split(",")

    def talk(name: str, message: str, expected: str, finds: str | None = None) -> None:
        """A model step: ok when ``expected`` ran without an error (and its first result holds ``finds``)."""
        def action():
            returned = client.user_message(agent_id=agent_state.id, message=message).messages
            called, errors = functions_called(returned)
            firsts = [ranked(str(m["function_return"]))[:1] for m in returned
                      if isinstance(m, dict) and m.get("function_return")]
            if finds is not None and not any(finds in first[0] for first in firsts if first):
                errors.append(f"no search result ranks a passage with {finds!r} first")
            return None, returned, called, errors, expected in called and not errors
        if "model" in kinds:
            steps.run(name, "model", message, expected, action)

    def call(name: str, function: str, arguments: dict, judge=lambda returned: None) -> None:
        """A script step: ``function`` called as MemGPT calls it for a model; ``judge`` says what is wrong."""
        def action():
            the_agent = agent()
            returned = the_agent.functions_python[function](self=the_agent, **arguments)
            problem = judge(returned)
            return None, returned, [function], [problem] if problem else [], problem is None
        if "script" in kinds:
            steps.run(name, "script", {function: arguments}, function, action)

    def fact_first(returned: str | None) -> str | None:
        found = ranked(returned or "")  # the model's own notes may be among them
        places = [next((i for i, passage in enumerate(found) if text in passage), None)
                  for text in (FACT, *DISTRACTORS)]
        if None in places or places[0] > min(places[1:]):
            return f"the fact is not above the other two passages: {found}"
        return None

    def saved(_: object) -> str | None:
        client.server.save_agents()
        after = client.get_agent_memory(agent_id=agent_state.id).core_memory.human
        return None if after.strip() == NEW_HUMAN else f"the saved human memory is {after!r}"

    talk("greeting", GREETING, "send_message")
    talk("archival insert", SAVE, "archival_memory_insert")
    for text in (FACT, *DISTRACTORS):
        call("archival insert", "archival_memory_insert", {"content": text})
    talk("archival search", SEARCH, "archival_memory_search", finds="peanuts")
    call("archival search", "archival_memory_search", {"query": QUERY}, fact_first)
    talk("core memory edit", CORRECTION, "core_memory_replace")
    human = agent().memory.memory["human"].value if "script" in kinds else ""
    call("core memory edit", "core_memory_replace", {"name": "human", "old_content": human, "new_content": NEW_HUMAN},
         saved)


if __name__ == "__main__":
    main()
