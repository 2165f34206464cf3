"""Every POST endpoint of the server, and the valid requests its fuzzing starts from (its seeds).

Shared by tests/test_fuzz_faces.py and bench/bench_fuzz.py: a mutation (tests/fuzz_mutations.py) takes
a seed and breaks one part of it. An endpoint added to the app is added here, with a seed or two as its
clients send them; tests/test_fuzz_faces.py fails until it is.

Seeds hold two placeholders that a fuzzing run fills in once its server is up (``with_run``):
``PREVIOUS``, the id of a response the run stored, and ``{seq}`` in a path, a request the inspector
captured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PREVIOUS = "resp_stored_by_this_run"


@dataclass(frozen=True)
class Endpoint:
    path: str  # as the app declares it
    seeds: tuple[dict[str, Any], ...]
    face: str = "openai"  # its errors' envelope and its streams' framing: "openai", "responses" or "anthropic"
    streams: bool = True  # takes ``stream``


SCHEMA = {"type": "object", "properties": {"path": {"type": "string", "description": "Where."},
                                           "depth": {"type": "integer", "minimum": 0}},
          "required": ["path"]}
FUNCTION = {"name": "list_files", "description": "List the files under a path.", "parameters": SCHEMA}

CHAT = {
    "model": "fake",
    "messages": [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": json.dumps({"type": "user_message", "message": "What is in src?"})},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "list_files", "arguments": '{"path": "src"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"files": ["a.py", "b.py"]}'},
        {"role": "user", "content": [{"type": "text", "text": "And in tests?"}]},
    ],
    "tools": [{"type": "function", "function": FUNCTION}],
    "tool_choice": "auto",
    "temperature": 0.2,
    "max_tokens": 64,
    "stream": False,
}
CHAT_LEGACY = {  # MemGPT's form: functions, a forced call, JSON output asked of plain text
    "model": "fake",
    "messages": [{"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "thinking", "function_call": {"name": "list_files", "arguments": "{}"}},
                 {"role": "function", "name": "list_files", "content": "[]"}],
    "functions": [FUNCTION],
    "function_call": {"name": "list_files"},
    "first_message": False,
    "stream": True,
    "stream_options": {"include_usage": True},
}
CHAT_FORMAT = {
    "model": "fake",
    "messages": [{"role": "developer", "content": "Answer in JSON."}, {"role": "user", "content": "Two files?"}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "files", "schema": SCHEMA}},
    "stop": ["\n\n"],
    "seed": 7,
}

COMPLETION = {"model": "fake", "prompt": "Once upon a time", "max_tokens": 16, "stop": ["."], "stream": False}
COMPLETION_GRAMMAR = {"model": "fake", "prompt": "Yes or no?", "grammar": 'root ::= "yes" | "no"', "stream": True}

CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a shell command.", "strict": True,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"],
                    "additionalProperties": False}},
    {"type": "namespace", "name": "mcp__files__", "description": "The files MCP server.",
     "tools": [{"type": "function", "name": "list", "parameters": SCHEMA}]},
    {"type": "custom", "name": "apply_patch", "description": "Edit files.",
     "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch\\n" /[^*]*/ "*** End Patch"'}},
    {"type": "custom", "name": "take_note", "description": "Write a note."},
    {"type": "web_search"},
]
CODEX = {  # as Codex CLI sends it: its tools, replayed reasoning, a call and its output, streamed
    "model": "gpt-5-codex",
    "instructions": "You are Codex, a coding agent.",
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."},
                                                         {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Run ls."}], "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "Done."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two files."}]},
        {"role": "user", "content": "Now read a.py."},
    ],
    "tools": CODEX_TOOLS,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "conversation-1",
    "text": {"verbosity": "low"},
}
RESPONSES_STORED = {  # openai-agents' way: a stored conversation continued, a named tool, JSON output
    "model": "fake",
    "input": "And the next step?",
    "previous_response_id": PREVIOUS,
    "tools": [{"type": "function", "name": "list_files", "parameters": SCHEMA}],
    "tool_choice": {"type": "function", "name": "list_files"},
    "max_output_tokens": 64,
    "metadata": {"session": "s1"},
    "store": True,
    "stream": False,
}
RESPONSES_FORMAT = {
    "model": "fake",
    "input": [{"role": "user", "content": "Two files?"}],
    "text": {"format": {"type": "json_schema", "name": "files", "schema": SCHEMA, "strict": True}},
    "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []},
    "temperature": 0.5,
    "top_p": 0.9,
}

CLAUDE_TOOLS = [
    {"name": "Bash", "description": "Run a command.", "input_schema": {
        "type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}},
    {"name": "Read", "description": "Read a file.", "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
]
CLAUDE_CODE = {  # as Claude Code sends it: system blocks, thinking, a tool loop, streamed
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0; cch=abc;"},
               {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>Be brief.</system-reminder>"},
                                     {"type": "text", "text": "What is in src?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "List it.", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Listing."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls src"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.py"}],
             "is_error": False},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
            {"type": "text", "text": "Read it.", "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": CLAUDE_TOOLS,
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "metadata": {"user_id": "user_abc_account_def_session_ghi"},
    "temperature": 1,
    "stream": True,
}
MESSAGES_PLAIN = {  # the anthropic SDK's way: a string system, a named tool, a stop sequence, JSON output
    "model": "fake",
    "max_tokens": 64,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                 {"role": "user", "content": "List src."}],
    "tools": [{"name": "list_files", "input_schema": SCHEMA}],
    "tool_choice": {"type": "tool", "name": "list_files"},
    "stop_sequences": ["END"],
    "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}, "effort": "low"},
    "top_p": 0.9,
    "stream": False,
}

EMBEDDINGS = {"model": "fake", "input": ["I am allergic to peanuts.", "What am I allergic to?"],
              "encoding_format": "float"}
EMBEDDINGS_TOKENS = {"input": [[40, 1052, 17], [5]], "encoding_format": "base64", "dimensions": 2, "user": "u1"}

RERUN = {"wrapper": "hermes", "syntax": None, "grammar": "none", "settings": {"temperature": 0, "top_k": 20}}

ENDPOINTS = [
    Endpoint("/v1/chat/completions", (CHAT, CHAT_LEGACY, CHAT_FORMAT)),
    Endpoint("/v1/completions", (COMPLETION, COMPLETION_GRAMMAR)),
    Endpoint("/v1/responses", (CODEX, RESPONSES_STORED, RESPONSES_FORMAT), face="responses"),
    Endpoint("/v1/messages", (CLAUDE_CODE, MESSAGES_PLAIN), face="anthropic"),
    Endpoint("/v1/messages/count_tokens",
             tuple({k: v for k, v in seed.items() if k not in ("max_tokens", "stream")}
                   for seed in (CLAUDE_CODE, MESSAGES_PLAIN)), face="anthropic", streams=False),
    Endpoint("/v1/embeddings", (EMBEDDINGS, EMBEDDINGS_TOKENS), streams=False),
    Endpoint("/inspect/api/requests/{seq}/rerun", (RERUN,), streams=False),
]


def endpoint_at(path: str) -> Endpoint:
    """The fuzzed endpoint at ``path`` (as the app declares it), or one that only answers (a GET: the
    models, a stored response), in the envelope of the face its path belongs to."""
    for endpoint in ENDPOINTS:
        if endpoint.path == path:
            return endpoint
    return Endpoint(path, (), face="anthropic" if path.startswith("/v1/messages") else "openai", streams=False)


def with_run(text: str, previous: str, seq: int) -> str:
    """A seed's path or body text with the placeholders of a fuzzing run filled in."""
    return text.replace(PREVIOUS, previous).replace("{seq}", str(seq))
