"""What the inspector tests share: a scripted model whose first answer needs a second chance and whose
second needs a repair, and the request that gets them."""

from __future__ import annotations

from server_helpers import ScriptedBackend, route

from llmproxy.route import Route

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
ASK = {"model": "m", "messages": [{"role": "user", "content": "What is 2 + 3?"}], "tools": TOOLS,
       "tool_choice": "required"}
UNKNOWN_CALL = '{"name": "fly_to_moon", "arguments": {}}'  # rejected: no such function
TRAILING_COMMA = '{"name": "add", "arguments": {"a": 2, "b": 3,}}'  # accepted once repaired
HERMES_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 20, "b": 3}}\n</tool_call>'


def scripted_route(grammar: str = "auto") -> tuple[ScriptedBackend, Route]:
    """A chatml-json route whose model answers the unknown call, then the trailing comma, then a good
    call; asked in the hermes format (its prompt offers ``<tools>``), a hermes call."""
    answers = [UNKNOWN_CALL, TRAILING_COMMA]

    def script(prompt: str) -> str:
        if "<tools>" in prompt:
            return HERMES_CALL
        return answers.pop(0) if answers else '{"name": "add", "arguments": {"a": 2, "b": 3}}'

    backend = ScriptedBackend(script)
    return backend, route(backend, "m", wrapper="chatml-json", grammar=grammar)
