"""The built-in example function set: send a message, remember a fact, search memory.

A miniature of MemGPT's memory functions, small enough for a 135M model to follow and executed right
here (memory is a list of strings), so ``llmproxy chat`` can show function calling turn by turn and
``llmproxy render``/``try -m`` have a realistic request without a request file.
"""

from __future__ import annotations

import json
import re
from typing import Any

SEND_MESSAGE = "send_message"

SYSTEM_PROMPT = (
    "You are a friendly assistant with a long-term memory. Answer every turn by calling one function. "
    "Call send_message to say something to the user; it is the only way the user sees your words. "
    "Call remember to save a fact the user tells you about themselves. "
    "Call search_memory to look up what you saved before answering a question about the user."
)

FUNCTIONS: list[dict[str, Any]] = [
    {
        "name": SEND_MESSAGE,
        "description": "Send a message to the user.",
        "parameters": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to say to the user."}},
            "required": ["message"],
        },
    },
    {
        "name": "remember",
        "description": "Save a fact about the user in long-term memory.",
        "parameters": {
            "type": "object",
            "properties": {"fact": {"type": "string", "description": "The fact, as one short sentence."}},
            "required": ["fact"],
        },
    },
    {
        "name": "search_memory",
        "description": "Search long-term memory for saved facts.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Words to look for."}},
            "required": ["query"],
        },
    },
]

TOOLS = [{"type": "function", "function": function} for function in FUNCTIONS]


def example_request(message: str) -> dict[str, Any]:
    """An OpenAI chat request: the system prompt, ``message`` from the user, and the example functions."""
    return {
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": message}],
        "tools": TOOLS,
        "tool_choice": "auto",
    }


class Memory:
    """The facts ``remember`` saved; ``search_memory`` finds those sharing a word with the query."""

    def __init__(self) -> None:
        self.facts: list[str] = []

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        """Execute a call to ``remember`` or ``search_memory``; the result as MemGPT's function-return JSON."""
        if name == "remember":
            self.facts.append(arguments["fact"])
            return _result(f"Saved: {arguments['fact']}")
        found = self.search(arguments["query"])
        return _result("; ".join(found) if found else "Nothing found.")

    def search(self, query: str) -> list[str]:
        words = _words(query)
        return [fact for fact in self.facts if words & _words(fact)]


_STOPWORDS = frozenset({"a", "an", "the", "is", "are", "my", "your", "of", "to", "in", "what", "who", "i", "me", "do"})


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - _STOPWORDS


def _result(message: str) -> str:
    return json.dumps({"status": "OK", "message": message})
