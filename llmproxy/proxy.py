"""The pipeline: OpenAI chat request -> prompt -> backend -> repaired, checked OpenAI response.

``plan`` decides everything before the backend is called (prompt, stops, grammar, token budget);
``finish`` turns the backend's raw text into the response. The library, the server and the CLI all
go through these two functions. ``plan`` is ``draft`` (render: computation only) then ``plan_draft``
with the prompt's token count, which may have to ask the backend; the server counts in between,
off its event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from llmproxy import grammar as grammars
from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.call_schema import call_json_schema
from llmproxy.calls import Answer, apply_heartbeat_rule, check_call, parse_answer, response_message
from llmproxy.errors import (
    ContextWindowExceededError,
    OutputParseError,
    UnsupportedRequestError,
    invalid_request,
)
from llmproxy.route import Route, build_route
from llmproxy.settings import deep_merge, to_generation_params
from llmproxy.tokens import TokenCount, answer_tokens, count_tokens
from llmproxy.types import ChatCompletion, ChatRequest, Choice, FunctionDefinition, ProxyInfo, ToolChoice, Usage
from llmproxy.wrappers import CallMode, Rendered


@dataclass(frozen=True)
class Plan:
    """What will be sent, and what is needed to read the answer."""

    request: ChatRequest
    route: Route
    rendered: Rendered
    params: GenerationParams
    prompt_tokens: TokenCount
    grammar: str | None  # "generated", "json_schema", a grammar name, or None
    functions: tuple[FunctionDefinition, ...]
    choice: ToolChoice


def _call_mode(route: Route, functions: Sequence[FunctionDefinition], choice: ToolChoice) -> CallMode:
    spec = route.wrapper.spec
    if not functions or choice.mode == "none":
        return "text"
    if spec.call == "text":
        raise UnsupportedRequestError(
            f"wrapper {spec.name!r} answers in plain text only and cannot honour tool_choice {choice.mode!r}; "
            "use a function-calling wrapper such as 'chatml'",
            param="tool_choice",
        )
    return "required" if choice.mode in ("required", "named") else spec.call


Constraint = Literal["generated", "json_schema", "named"]


def _constraint(route: Route, call: CallMode) -> Constraint | None:
    """How this request's output will be constrained, if at all."""
    if route.grammar == "none" or call == "text":
        return None
    capabilities = route.backend.capabilities
    if route.grammar != "auto":
        if not capabilities.grammar:
            raise UnsupportedRequestError(
                f"grammar {route.grammar!r} was asked for, but the {route.backend.name} backend does not take "
                "grammars; use --grammar none or a backend that does (embedded, llamacpp, koboldcpp, webui, vllm)",
                param="grammar",
            )
        return "named"
    if capabilities.grammar:
        return "generated"
    if capabilities.json_schema:
        return "json_schema"
    return None  # no constraint possible: the answer still goes through repair and validation


def _constrain(settings: dict[str, Any], constraint: Constraint | None, route: Route, rendered: Rendered,
               functions: Sequence[FunctionDefinition], choice: ToolChoice) -> str | None:
    """Put the grammar or schema for ``constraint`` into ``settings``; returns its label."""
    spec = route.wrapper.spec
    named = choice.name if choice.mode == "named" else None
    if constraint == "generated":
        settings["grammar"] = grammars.build_call_grammar(
            [f.model_dump(exclude_none=True) for f in functions],
            inner_thoughts=spec.inner_thoughts,
            choice=named or ("auto" if rendered.call == "optional" else "required"),
            prefix=rendered.prefix,
        )
        return "generated"
    if constraint == "json_schema":
        settings["json_schema"] = call_json_schema(
            functions, inner_thoughts=spec.inner_thoughts, optional=rendered.call == "optional", only=named
        )
        return "json_schema"
    if constraint == "named":
        text = grammars.load_grammar(route.grammar)
        grammars.validate_grammar(text)
        settings["grammar"] = text
        return route.grammar
    return None


@dataclass(frozen=True)
class Draft:
    """A request rendered for its route, before its prompt's tokens are counted."""

    request: ChatRequest
    route: Route
    rendered: Rendered
    functions: tuple[FunctionDefinition, ...]
    choice: ToolChoice
    constraint: Constraint | None


def draft(request: ChatRequest, route: Route, *, first_message: bool = False) -> Draft:
    """Render the request for ``route`` (no call to the backend)."""
    functions = tuple(request.function_definitions())
    choice = request.choice()
    call = _call_mode(route, functions, choice)
    constraint = _constraint(route, call)
    rendered = route.wrapper.render(
        request.messages,
        functions,
        call=call,
        first_message=first_message,
        force_function=choice.name if choice.mode == "named" else None,
        primed=constraint != "json_schema",  # a JSON schema constrains a whole object, not a continuation
    )
    return Draft(request, route, rendered, functions, choice, constraint)


def plan_draft(drafted: Draft, prompt_tokens: TokenCount) -> Plan:
    """The generation parameters for a rendered request whose prompt has ``prompt_tokens``."""
    request, route, rendered = drafted.request, drafted.route, drafted.rendered
    room = route.context_window - prompt_tokens.tokens
    if room <= 0:
        raise ContextWindowExceededError(prompt_tokens.tokens, route.context_window)

    from_request: dict[str, Any] = {
        key: value
        for key, value in (
            ("temperature", request.temperature),
            ("top_p", request.top_p),
            ("seed", request.seed),
            ("max_tokens", request.answer_limit()),
        )
        if value is not None
    }
    settings = deep_merge(route.base_settings, from_request)
    constraint_label = _constrain(settings, drafted.constraint, route, rendered, drafted.functions, drafted.choice)
    stops = list(dict.fromkeys([*rendered.stop, *(settings.get("stop") or []), *request.stop_list()]))
    settings["stop"] = stops
    settings["max_tokens"] = min(settings.get("max_tokens") or room, room)  # the answer must fit too
    return Plan(request, route, rendered, to_generation_params(settings), prompt_tokens, constraint_label,
                drafted.functions, drafted.choice)


def plan(request: ChatRequest, route: Route, *, first_message: bool = False) -> Plan:
    """Render the request for ``route`` and work out the generation parameters."""
    drafted = draft(request, route, first_message=first_message)
    return plan_draft(drafted, count_tokens(drafted.rendered.prompt, route.backend))


def finish(plan: Plan, completion: Completion, completion_count: TokenCount | None = None) -> ChatCompletion:
    """Turn the backend's raw text into the OpenAI response. ``completion_count``: the answer's tokens,
    when the caller has counted them already (counting may call the backend)."""
    raw = completion.text
    route = plan.route
    wrapper = route.wrapper
    text = wrapper.output_text(raw, plan.rendered)
    if plan.rendered.call == "text":
        answer = Answer(text, None)
    else:
        answer = _read_call(plan, text, completion)
    message, finish_reason = response_message(answer.content, answer.call, plan.request.answer_form)
    if completion.finish_reason == "length":
        finish_reason = "length"

    completion_count = completion_count or answer_tokens(completion, route.backend)
    prompt_count = (
        TokenCount(completion.prompt_tokens, True) if completion.prompt_tokens is not None else plan.prompt_tokens
    )
    return ChatCompletion(
        model=plan.request.model or route.name,
        choices=[Choice(message=message, finish_reason=finish_reason)],
        usage=Usage(
            prompt_tokens=prompt_count.tokens,
            completion_tokens=completion_count.tokens,
            total_tokens=prompt_count.tokens + completion_count.tokens,
        ),
        llmproxy=ProxyInfo(
            wrapper=wrapper.name,
            backend=route.backend.name,
            grammar=plan.grammar,
            repairs=list(answer.repairs),
            usage_estimated=not (prompt_count.exact and completion_count.exact),
            raw_output=raw,
        ),
    )


def _read_call(plan: Plan, text: str, completion: Completion) -> Answer:
    raw = completion.text
    if not raw.strip():
        raise OutputParseError("The backend returned an empty answer.", raw)
    try:
        answer = parse_answer(text, call_required=plan.rendered.call == "required")
        if answer.call is None:  # only possible when the call is optional (tool_choice auto)
            return answer
        call = check_call(answer.call, plan.functions, plan.choice, raw)
        if plan.route.function_correction:
            call = apply_heartbeat_rule(call, plan.request.messages, plan.functions)
        return Answer(answer.content, call, answer.repairs)
    except OutputParseError as exc:
        if completion.finish_reason != "length":
            raise
        hint = f" The answer was cut off at the token limit ({plan.params.max_tokens}); raise max_tokens."
        raise type(exc)(exc.reason + hint, raw) from exc


def chat_completion(request: ChatRequest, route: Route, *, first_message: bool = False) -> ChatCompletion:
    """Run one request through ``route``."""
    prepared = plan(request, route, first_message=first_message)
    completion = route.backend.complete(prepared.rendered.prompt, prepared.params)
    return finish(prepared, completion)


def parse_request(fields: dict[str, Any]) -> ChatRequest:
    """Validate an OpenAI chat request; a bad one raises InvalidRequestError naming the field."""
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from exc


def get_chat_completion(
    messages: Sequence[Any],
    functions: Sequence[Any] | None = None,
    function_call: Any = None,
    tools: Sequence[Any] | None = None,
    tool_choice: Any = None,
    *,
    model: str | None = None,
    wrapper: str | None = None,
    endpoint_type: str = "embedded",
    endpoint: str | None = None,
    context_window: int | None = None,
    first_message: bool = False,
    function_correction: bool = True,
    grammar: str | None = None,
    settings: dict[str, Any] | None = None,
    auth_type: str | None = None,
    auth_key: str | None = None,
    backend_options: dict[str, Any] | None = None,
    **request_fields: Any,
) -> ChatCompletion:
    """Answer an OpenAI chat request with a local model; the keyword names are MemGPT's.

    ``messages``, ``functions``/``tools`` and the rest may be dicts or llmproxy's pydantic models.
    Extra keyword arguments (``temperature``, ``max_tokens``, ``stop``, ``seed`` ...) are request fields.
    ``endpoint_type`` defaults to the embedded model; ``wrapper`` to ``chatml``; ``grammar`` to the
    wrapper alias's setting, else ``auto``. ``backend_options`` go to the backend's constructor
    (``connect_timeout``, ``read_timeout``, vLLM's ``grammar_field``).
    """
    fields: dict[str, Any] = {"messages": list(messages), "model": model, **request_fields}
    for key, value in (("functions", functions), ("function_call", function_call), ("tools", tools), ("tool_choice", tool_choice)):
        if value is not None:
            fields[key] = value
    request = parse_request(fields)
    route = build_route(
        endpoint_type=endpoint_type,
        endpoint=endpoint,
        model=model,
        wrapper=wrapper,
        grammar=grammar,
        context_window=context_window,
        settings=settings,
        function_correction=function_correction,
        auth_type=auth_type,
        auth_key=auth_key,
        backend_options=backend_options,
    )
    return chat_completion(request, route, first_message=first_message)
