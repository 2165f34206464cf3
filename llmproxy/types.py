"""Pydantic models of the OpenAI chat wire format: requests, responses, stream chunks, errors.

Requests accept both the legacy ``functions``/``function_call`` form and the ``tools``/``tool_choice``
form. Internally everything is normalised to a list of ``FunctionDefinition`` plus a ``ToolChoice``;
responses answer in the form the request used (``AnswerForm``).
"""

from __future__ import annotations

import json
import os
import random
import time
from functools import cached_property
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

AnswerForm = Literal["tools", "functions"]
PRESET_NAME_LIMIT = 100  # a preset is a file name; an error message quotes what was sent
PRESET_FIELD_HELP = ("llmproxy extension: a settings preset ('llmproxy settings' lists them) in place of the model's "
                     "own; the request's sampling fields still win over it")


class _Model(BaseModel):
    # Clients send fields we do not use (store, metadata, logprobs...); ignore them rather than fail.
    model_config = ConfigDict(extra="ignore")


# --- functions and calls ---------------------------------------------------------------------


class FunctionDefinition(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type", "object") != "object":
            raise ValueError("function parameters must be a JSON schema of type 'object'")
        return value

    @cached_property
    def definition_json(self) -> str:
        """The definition as compact JSON, made once: the key of the caches that build from it
        (grammars, the templates' views of the tools), read several times per request."""
        try:
            return self.model_dump_json(exclude_none=True)
        except ValueError:  # a lone surrogate, which UTF-8 cannot hold: escaped (the prompt's check refuses it)
            return json.dumps(self.model_dump(exclude_none=True), separators=(",", ":"))


class Tool(_Model):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class FunctionCall(_Model):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(_Model):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: NamedFunction


# --- messages --------------------------------------------------------------------------------


class TextPart(_Model):
    type: Literal["text"]
    text: str


Content = Union[str, list[TextPart], None]


def content_text(content: Content) -> str | None:
    """Plain text of a message's content (text parts joined); None stays None."""
    if content is None or isinstance(content, str):
        return content
    return "".join(part.text for part in content)


class SystemMessage(_Model):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class UserMessage(_Model):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Model):
    role: Literal["assistant"]
    content: Content = None
    name: str | None = None
    function_call: FunctionCall | None = None
    tool_calls: list[ToolCall] | None = None
    # The turn's reasoning, replayed where the template has a place for it (interleaved thinking in a
    # tool loop); under either name clients send it (see ResponseMessage).
    reasoning_content: str | None = None
    reasoning: str | None = None

    def thought(self) -> str | None:
        return self.reasoning_content or self.reasoning or None

    def calls(self) -> list[FunctionCall]:
        """Every call this message made, whichever form it used."""
        found = [call.function for call in self.tool_calls or []]
        if self.function_call is not None:
            found.append(self.function_call)
        return found


class ToolMessage(_Model):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


class FunctionMessage(_Model):
    role: Literal["function"]
    content: Content
    name: str


Message = Annotated[
    Union[SystemMessage, UserMessage, AssistantMessage, ToolMessage, FunctionMessage],
    Field(discriminator="role"),
]


# --- request ---------------------------------------------------------------------------------


class StreamOptions(_Model):
    include_usage: bool = False


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


ToolChoiceValue = Union[Literal["none", "auto", "required"], NamedToolChoice]
FunctionCallValue = Union[Literal["none", "auto"], NamedFunction]


class ToolChoice(BaseModel):
    """The normalised choice: ``mode`` is none/auto/required/named; ``name`` is set when named."""

    mode: Literal["none", "auto", "required", "named"] = "auto"
    name: str | None = None


class ChatRequest(_Model):
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    functions: list[FunctionDefinition] | None = None
    function_call: FunctionCallValue | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoiceValue | None = None
    parallel_tool_calls: bool | None = None  # OpenAI's default (None) is true
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None  # "none" (or "minimal") asks a reasoning model not to reason
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's way: {"enable_thinking": false}
    n: int = Field(default=1, ge=1, le=1)
    user: str | None = None
    logprobs: bool | None = None  # where the backend reports them (embedded, llama.cpp); else refused, never a silent null
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    preset: str | None = Field(default=None, max_length=PRESET_NAME_LIMIT, description=PRESET_FIELD_HELP)

    @model_validator(mode="after")
    def _one_form(self) -> ChatRequest:
        if self.functions and self.tools:
            raise ValueError("send either 'functions' (legacy) or 'tools', not both")
        names = [f.name for f in self.function_definitions()]
        if len(names) != len(set(names)):
            raise ValueError("function names must be unique")
        choice = self.choice()
        if choice.mode == "named" and choice.name not in names:
            raise ValueError(f"the chosen function {choice.name!r} is not among the given functions {names}")
        return self

    @property
    def answer_form(self) -> AnswerForm:
        return "functions" if self.functions is not None or self.function_call is not None else "tools"

    def function_definitions(self) -> list[FunctionDefinition]:
        if self.tools:
            return [tool.function for tool in self.tools]
        return list(self.functions or [])

    def choice(self) -> ToolChoice:
        raw = self.tool_choice if self.tool_choice is not None else self.function_call
        if raw is None:
            return ToolChoice(mode="auto")
        if isinstance(raw, str):
            return ToolChoice(mode=raw)
        if isinstance(raw, NamedToolChoice):
            return ToolChoice(mode="named", name=raw.function.name)
        return ToolChoice(mode="named", name=raw.name)

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def answer_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def wants_reasoning(self) -> bool:
        """False when the request asks the model not to reason (where its template can switch it off)."""
        kwargs = self.chat_template_kwargs or {}
        return self.reasoning_effort not in ("none", "minimal") and kwargs.get("enable_thinking") is not False


# --- response --------------------------------------------------------------------------------

ChatFinishReason = Literal["stop", "length", "function_call", "tool_calls"]


class Usage(_Model):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ResponseMessage(_Model):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    # The model's reasoning, under both names clients read: ``reasoning_content`` (DeepSeek, vLLM,
    # llama.cpp) and ``reasoning`` (vLLM's newer name, Ollama's OpenAI routes).
    reasoning_content: str | None = None
    reasoning: str | None = None
    function_call: FunctionCall | None = None
    tool_calls: list[ToolCall] | None = None


class TopLogprob(_Model):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprobs(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(_Model):
    """OpenAI's ``logprobs`` of a choice: the generated tokens (of the model's raw output, which the
    answer was read from), each with its top alternatives."""

    content: list[TokenLogprobs] | None = None


class Choice(_Model):
    index: int = 0
    message: ResponseMessage
    finish_reason: ChatFinishReason
    logprobs: ChoiceLogprobs | None = None


class ProxyInfo(_Model):
    """llmproxy's own account of how the answer was made (extra field; OpenAI clients ignore it)."""

    wrapper: str
    backend: str
    grammar: str | None = None
    repairs: list[str] = Field(default_factory=list)
    usage_estimated: bool = False
    raw_output: str = ""  # of the last generation
    stop_sequence: str | None = None  # the request's own stop string that ended the answer, where the backend says
    attempts: int = 1  # generations it took: more than one when an unusable answer got a second chance
    fallbacks: list[Fallback] = Field(default_factory=list)  # the server's models tried first, in order
    escalated_from: Fallback | None = None  # the model whose answer stayed unusable, and why (its escalate_to answered)
    notes: list[str] = Field(default_factory=list)  # what a face left out or replaced (an image for a text model)


class Fallback(_Model):
    """A model the server tried before the one that answered (its backend down, busy or silent)."""

    model: str
    error: str  # the error code it failed with


# Ids only need to be unique, not secret: a generator seeded once from the OS costs no system call
# per id (os.urandom, behind uuid4, lets other threads take the GIL on a busy server).
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)  # server workers must not repeat each other's ids


def new_id(prefix: str, separator: str = "-") -> str:
    return f"{prefix}{separator}{_ids.getrandbits(96):024x}"


class ChatCompletion(_Model):
    id: str = Field(default_factory=lambda: new_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    llmproxy: ProxyInfo | None = None


class FunctionCallDelta(_Model):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(_Model):
    index: int = 0
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class Delta(_Model):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    function_call: FunctionCallDelta | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(_Model):
    index: int = 0
    delta: Delta
    finish_reason: ChatFinishReason | None = None


class ChatCompletionChunk(_Model):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


# --- errors ----------------------------------------------------------------------------------


class ErrorDetail(_Model):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(_Model):
    error: ErrorDetail
