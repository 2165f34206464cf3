"""Raw text completions (POST /v1/completions): the caller's prompt goes to the backend unchanged.

No wrapper and no function calling: the route's settings layers (less their stop strings, which
belong to the wrappers' formats), the context check, and an optional constraint (``grammar``: a
shipped grammar's name or GBNF text; or ``response_format``). The request and response models, and
the plan and finish stages (chat's are llmproxy.proxy's ``plan_draft`` and ``finish``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.errors import ContextWindowExceededError
from llmproxy.constraints import format_constraint, grammar_constraint
from llmproxy.route import Route
from llmproxy.settings import deep_merge, to_generation_params
from llmproxy.tokens import TokenCount, answer_tokens
from llmproxy.types import PRESET_FIELD_HELP, PRESET_NAME_LIMIT, ResponseFormat, StreamOptions, Usage, new_id


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    grammar: str | None = Field(default=None, description="llmproxy extension: a grammar name or GBNF text")
    preset: str | None = Field(default=None, max_length=PRESET_NAME_LIMIT, description=PRESET_FIELD_HELP)
    n: int = Field(default=1, ge=1, le=1)

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        # OpenAI also takes a list of prompts; one prompt per request is what a local backend serves.
        if isinstance(value, list) and len(value) == 1:
            return value[0]
        return value


class TextChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class TextCompletion(BaseModel):
    """A /v1/completions response; streamed chunks have the same shape with text deltas."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage | None = None


@dataclass(frozen=True)
class TextPlan:
    request: CompletionRequest
    route: Route
    params: GenerationParams
    prompt_tokens: TokenCount
    grammar: str | None
    id: str
    created: int

    @property
    def model(self) -> str:
        return self.request.model or self.route.name


def plan_text(request: CompletionRequest, route: Route, prompt_tokens: TokenCount) -> TextPlan:
    """Settings, stops, grammar and token budget for a raw completion whose prompt has ``prompt_tokens``."""
    constraint = (grammar_constraint(route.backend, request.grammar) if request.grammar is not None
                  else format_constraint(route.backend, request.response_format))
    room = route.context_window - prompt_tokens.tokens
    if room <= 0:
        raise ContextWindowExceededError(prompt_tokens.tokens, route.context_window)
    values = {"temperature": request.temperature, "top_p": request.top_p, "seed": request.seed,
              "max_tokens": request.max_tokens}
    asked = {key: value for key, value in values.items() if value is not None}
    settings = deep_merge(route.settings_for(request.preset), asked)
    settings.update(constraint.settings())
    # Only the caller's stop strings: the settings' ones belong to the wrappers' prompt formats.
    settings["stop"] = [request.stop] if isinstance(request.stop, str) else request.stop or []
    settings["max_tokens"] = min(settings.get("max_tokens") or room, room)
    return TextPlan(request, route, to_generation_params(settings), prompt_tokens, constraint.label,
                    new_id("cmpl"), int(time.time()))


def finish_text(plan: TextPlan, completion: Completion,
                      completion_count: TokenCount | None = None) -> TextCompletion:
    """The response for a raw completion; ``completion_count`` as in ``proxy.finish``."""
    completion_tokens = (completion_count or answer_tokens(completion, plan.route.backend)).tokens
    prompt_tokens = completion.prompt_tokens if completion.prompt_tokens is not None else plan.prompt_tokens.tokens
    return TextCompletion(
        id=plan.id, created=plan.created, model=plan.model,
        choices=[TextChoice(text=completion.text, finish_reason=completion.finish_reason)],
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                    total_tokens=prompt_tokens + completion_tokens),
    )
