"""Shared fixtures: a MemGPT-style conversation and MemGPT's eight memory functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from llmproxy.types import FunctionDefinition, Message

FIXTURES = Path(__file__).parent / "fixtures"


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
