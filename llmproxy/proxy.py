"""The pipeline: OpenAI chat request -> prompt -> backend -> repaired, checked OpenAI response.

``plan`` decides everything before the backend is called (prompt, stops, grammar, token budget);
``finish`` turns the backend's raw text into the response. The library, the server and the CLI all
go through these two functions. ``plan`` is ``draft`` (render: computation only) then ``plan_draft``
with the prompt's token count, which may have to ask the backend; the server counts in between,
off its event loop. An answer that cannot be used gets second chances by one rule, ``Attempts``, which
the library's and the CLI's loop (``answer_with_retries``) and every server endpoint keep.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from difflib import get_close_matches
from typing import Any

from pydantic import TypeAdapter, ValidationError

from llmproxy import constraints
from llmproxy.backends import backends_with
from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.calls import HEARTBEAT_KEY, apply_heartbeat_rule, check_call, response_message, schema_problem
from llmproxy.client_schemas import check_client_schema, check_tool_parameters
from llmproxy.constraints import Constraint, format_schema
from llmproxy.decide import ranked_choice, request_decide
from llmproxy.common.bounded_cache import MIB
from llmproxy.common.json_cache import cached_by_json
from llmproxy.common.loops import looping_unit
from llmproxy.common.nesting import MAX_NESTING, nested_deeper
from llmproxy.common.surrogates import refuse_lone_surrogates
from llmproxy.errors import (
    ContextWindowExceededError,
    InvalidRequestError,
    JSONRepairError,
    OutputParseError,
    UnsupportedRequestError,
    invalid_request,
)
from llmproxy.repair import repair_value
from llmproxy.second_chance_note import NOTE_CLOSING, NOTE_OPENING, is_second_chance_note, second_chance_note
from llmproxy.route import DEFAULT_RETRIES, Route, build_route
from llmproxy.settings import deep_merge, to_generation_params
from llmproxy.syntaxes import split_reasoning
from llmproxy.syntaxes.base import Answer, AnswerShape, Call, CallMode
from llmproxy.tokens import TokenCount, answer_tokens, count_tokens
from llmproxy.types import (
    AssistantMessage,
    ChatCompletion,
    ChatRequest,
    Choice,
    ChoiceLogprobs,
    FunctionDefinition,
    ProxyInfo,
    ResponseFormat,
    TokenLogprobs,
    Tool,
    ToolChoice,
    TopLogprob,
    Usage,
    content_text,
)
from llmproxy.prompts import Rendered, cut_at_markers, leaked


@dataclass(frozen=True)
class Draft:
    """A request rendered for its route, before its prompt's tokens are counted."""

    request: ChatRequest
    route: Route
    rendered: Rendered
    constraint: Constraint

    @property
    def shape(self) -> AnswerShape:
        return self.rendered.shape


@dataclass(frozen=True)
class Plan:
    """What will be sent, and what is needed to read the answer."""

    request: ChatRequest
    route: Route
    rendered: Rendered
    params: GenerationParams
    prompt_tokens: TokenCount
    grammar: str | None  # the constraint's label: "generated", "json_schema", a grammar name, or None

    @property
    def shape(self) -> AnswerShape:
        return self.rendered.shape


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


def draft(request: ChatRequest, route: Route, *, first_message: bool = False, schemas_checked: bool = False) -> Draft:
    """Render the request for ``route`` and decide its output constraint (no call to the backend).
    ``schemas_checked``: the caller has run ``check_schemas`` on the request, or on the one its second
    chance grew from (a second chance adds a message, never a schema), so the schemas are not checked
    again."""
    if request.logprobs or request.top_logprobs:
        _check_logprobs(request, route)
    functions = tuple(request.function_definitions())
    if not schemas_checked:
        check_schemas(request)
    choice = request.choice()
    call = _call_mode(route, functions, choice)
    kind = constraints.call_constraint(route, call)
    named = choice.mode == "named"
    decide = request_decide(route.decide, request, call)
    parallel = request.answer_form == "tools" and request.parallel_tool_calls is not False
    if decide == "choose" and not route.backend.capabilities.follows_call_lists:
        parallel = False  # one call: the list would not be followed (llmproxy.backends._probed_choice)
    shape = route.wrapper.shape(
        call,
        functions,
        (choice.name,) if named else tuple(f.name for f in functions),
        named=named,
        parallel=parallel,
        first_message=first_message,
        primed=kind != "json_schema",  # a JSON schema constrains a whole answer, not a continuation
        decide=decide,
    )
    rendered = route.wrapper.render(request.messages, shape, first_message=first_message,
                                    reasoning=request.wants_reasoning())
    _check_encodable(rendered.prompt, request)
    constraint = constraints.answer_constraint(kind, route, shape, request.response_format)
    if constraint.choice is not None:
        constraint = replace(constraint, choice=ranked_choice(constraint.choice, shape, request))
    return Draft(request, route, rendered, constraint)


def check_schemas(request: ChatRequest) -> int:
    """Check the schemas the client sent (tool parameters, ``response_format``); the JSON values they
    hold, which the work of building the request's output constraint grows with."""
    values = 0
    for index, function in enumerate(request.function_definitions()):
        values += check_tool_parameters(function, f"tools[{index}].function.parameters")
    if request.response_format is not None and request.response_format.json_schema:
        values += check_client_schema(request.response_format.json_schema.get("schema"),
                                      "response_format.json_schema.schema")
    return values


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
            ("logprobs", (request.top_logprobs or 0) if request.logprobs else None),
        )
        if value is not None
    }
    settings = deep_merge(route.settings_for(request.preset), from_request)
    settings.update(drafted.constraint.settings())
    settings["stop"] = list(dict.fromkeys([*rendered.stop, *(settings.get("stop") or []), *request.stop_list()]))
    settings["max_tokens"] = min(settings.get("max_tokens") or room, room)  # the answer must fit too
    return Plan(request, route, rendered, to_generation_params(settings), prompt_tokens, drafted.constraint.label)


def streams_calls(plan: Plan) -> bool:
    """Whether a stream may send the answer's calls while they are written: only where the syntax's own
    grammar (or JSON schema) writes them, so no repair can change what was sent, and where MemGPT's
    heartbeat rule cannot add an argument afterwards."""
    if plan.shape.call == "text" or plan.route.grammar != "auto" or plan.grammar is None:
        return False
    return not (plan.route.function_correction
                and any(HEARTBEAT_KEY in f.parameters.get("properties", {}) for f in plan.shape.definitions))


def plan(request: ChatRequest, route: Route, *, first_message: bool = False, schemas_checked: bool = False) -> Plan:
    """Render the request for ``route`` and work out the generation parameters (``schemas_checked``: as
    for ``draft``)."""
    drafted = draft(request, route, first_message=first_message, schemas_checked=schemas_checked)
    return plan_draft(drafted, count_tokens(drafted.rendered.prompt, route.backend))


def finish(plan: Plan, completion: Completion, completion_count: TokenCount | None = None) -> ChatCompletion:
    """Turn the backend's raw text into the OpenAI response. ``completion_count``: the answer's tokens,
    when the caller has counted them already (counting may call the backend)."""
    raw = completion.text
    route = plan.route
    thought, text = split_reasoning(cut_at_markers(raw, route.wrapper.spec.stop), plan.shape.reasoning)
    if plan.shape.call == "text":
        answer = Answer(text.strip(), reasoning=thought)
    elif completion.finish_reason == "length":
        answer = _read_cut_calls(plan, thought, text, completion)
    else:
        answer = _read_calls(plan, thought, text, completion)
    if not answer.calls and completion.finish_reason != "length":
        answer = _in_requested_format(answer, plan.request.response_format, raw)
    _refuse_leaks(answer, plan.request, raw)
    message, finish_reason = response_message(answer.content, answer.calls, plan.request.answer_form,
                                              answer.reasoning)
    if completion.finish_reason == "length":
        finish_reason = "length"

    completion_count = completion_count or answer_tokens(completion, route.backend)
    prompt_count = (
        TokenCount(completion.prompt_tokens, True) if completion.prompt_tokens is not None else plan.prompt_tokens
    )
    return ChatCompletion(
        model=plan.request.model or route.name,
        choices=[Choice(message=message, finish_reason=finish_reason,
                        logprobs=_choice_logprobs(completion, plan.request.top_logprobs or 0)
                        if plan.request.logprobs else None)],
        usage=Usage(
            prompt_tokens=prompt_count.tokens,
            completion_tokens=completion_count.tokens,
            total_tokens=prompt_count.tokens + completion_count.tokens,
        ),
        llmproxy=ProxyInfo(
            wrapper=route.wrapper.name,
            backend=route.backend.name,
            grammar=plan.grammar,
            repairs=list(answer.repairs),
            usage_estimated=not (prompt_count.exact and completion_count.exact),
            raw_output=raw,
            # Only the caller's own stop strings: the wrapper's end-of-turn stops are how every answer ends.
            stop_sequence=completion.stop_word if completion.stop_word in plan.request.stop_list() else None,
        ),
    )


def _parse(shape: AnswerShape, thought: str | None, text: str) -> Answer:
    """The answer in ``text``; a call the model wrote inside its reasoning counts too (a reasoning block
    left open ends the answer, and a lazy grammar can start a call inside it)."""
    start = shape.syntax.call_start(thought, shape) if thought else -1
    try:
        answer = shape.syntax.parse(text, shape)
    except OutputParseError:
        if start < 0:
            raise
        answer = Answer(None)
    if answer.calls or start < 0:
        return replace(answer, reasoning=thought)
    found = shape.syntax.parse(thought[start:], shape)
    return Answer(answer.content, found.calls, found.repairs + ("call_in_reasoning",), thought[:start].strip() or None)


def _read_calls(plan: Plan, thought: str | None, text: str, completion: Completion) -> Answer:
    """The answer's content, reasoning and checked calls."""
    raw, shape = completion.text, plan.shape
    if not raw.strip():
        raise OutputParseError("The backend returned an empty answer.", raw)
    try:
        answer = _parse(shape, thought, text)
        calls, repairs = answer.calls, answer.repairs
        if len(calls) > 1 and not shape.parallel:
            calls, repairs = calls[:1], repairs + ("drop_extra_calls",)
        if completion.finish_reason == "length":
            calls, repairs = _without_a_broken_last_call(calls, repairs, shape, raw)
        checked = tuple(check_call(call, shape.functions, shape.allowed, raw) for call in calls)
        unique: dict[tuple[str, str], Call] = {}
        for call in checked:
            unique.setdefault((call.name, json.dumps(call.arguments, sort_keys=True)), call)
        if len(unique) < len(checked):  # a call made again, word for word, in one answer: it would run twice
            checked, repairs = tuple(unique.values()), repairs + ("drop_repeated_call",)
        if plan.route.function_correction:
            checked = tuple(apply_heartbeat_rule(call, plan.request.messages, shape.functions) for call in checked)
        return Answer(answer.content, checked, repairs, answer.reasoning)
    except OutputParseError as exc:
        # Errors carry the backend's own output, whatever text the syntax was reading.
        hint = ""
        if completion.finish_reason == "length":
            hint = f" The answer was cut off at the token limit ({plan.params.max_tokens}); raise max_tokens."
        if not hint and exc.raw == raw:
            raise
        raise type(exc)(exc.reason + hint, raw) from exc


def _without_a_broken_last_call(calls: tuple[Call, ...], repairs: tuple[str, ...], shape: AnswerShape,
                                raw: str) -> tuple[tuple[Call, ...], tuple[str, ...]]:
    """The calls of an answer cut at the token limit, less the last one where the cut left it unusable
    and whole calls come before it: those stand, and ``finish_reason`` "length" tells the rest."""
    if len(calls) < 2:
        return calls, repairs
    try:
        check_call(calls[-1], shape.functions, shape.allowed, raw)
    except OutputParseError:
        return calls[:-1], repairs + ("drop_cut_call",)
    return calls, repairs


def _in_requested_format(answer: Answer, response_format: ResponseFormat | None, raw: str) -> Answer:
    """A text answer to a request with a JSON ``response_format``, parsed, repaired and checked against
    its schema on every backend (one that ignored the constraint included). Its content becomes the
    repaired JSON."""
    schema = format_schema(response_format) if response_format is not None else None
    if schema is None:
        return answer
    try:
        repaired = repair_value(answer.content or "", expect="any")
    except JSONRepairError as exc:
        raise OutputParseError(f"The answer is not the JSON the response_format asks for ({exc}).", raw) from exc
    problem = schema_problem(repaired.value, schema)
    if problem:
        raise OutputParseError(f"The answer does not match the response_format's schema: {problem}.", raw)
    content = answer.content if not repaired.repairs else json.dumps(repaired.value, ensure_ascii=False)
    return replace(answer, content=content, repairs=answer.repairs + repaired.repairs)


def _refuse_leaks(answer: Answer, request: ChatRequest, raw: str) -> None:
    """An answer that returns llmproxy's own words - a wrapper's instructions or placeholders, a second
    chance's note - as its text or in a call's arguments is no answer (llmproxy.prompts.leaked)."""
    texts = [answer.content or "", *(json.dumps(call.arguments, ensure_ascii=False) for call in answer.calls)]
    leak = leaked(texts, lambda: _client_text(request), (NOTE_OPENING, NOTE_CLOSING))
    if leak is not None:
        raise OutputParseError(f"The answer repeats the instructions it was given ({leak!r}) instead of answering; "
                               "never copy them, and fill in real values.", raw)


def _client_text(request: ChatRequest) -> str:
    """Everything the client wrote: its messages' text (not a second chance's notes), their past calls,
    and its functions."""
    texts = [function.definition_json for function in request.function_definitions()]
    for message in request.messages:
        if not is_second_chance_note(message):
            texts.append(content_text(message.content) or "")
        if isinstance(message, AssistantMessage):
            texts += [call.function.arguments for call in message.tool_calls or []]
            if message.function_call is not None:
                texts.append(message.function_call.arguments)
    return "\n".join(texts)


def _read_cut_calls(plan: Plan, thought: str | None, text: str, completion: Completion) -> Answer:
    """An answer cut at the token limit: its calls where they can be read (a repair may close them),
    else what was written, as text - OpenAI's way: ``finish_reason`` "length" says the rest. An answer
    that went round in a loop until the limit is an error instead (llmproxy.common.loops)."""
    unit = looping_unit(completion.text)
    if unit is not None:
        shown = unit if len(unit) <= 60 else unit[:57] + "..."
        raise OutputParseError(f"The answer went round in a loop: it wrote {shown!r} over and over until the "
                               f"token limit ({plan.params.max_tokens}).", completion.text)
    try:
        return _read_calls(plan, thought, text, completion)
    except OutputParseError:
        return Answer(text.strip() or None, repairs=("cut_at_token_limit",), reasoning=thought)




def second_chance(request: ChatRequest, error: OutputParseError, attempt: int) -> ChatRequest:
    """``request`` again after an answer that could not be used: the checker's message is added as a
    user turn (so the wrapper writes it in its own format), and a seed the caller fixed moves on."""
    note = second_chance_note(error.reason)
    seed = None if request.seed is None else request.seed + attempt
    return request.model_copy(update={"messages": [*request.messages, note], "seed": seed})


class Attempts:
    """The tries one request gets on its route: the first, then ``route.retries`` second chances, each
    told why the answer before could not be used. The one retry rule of every face: the library's and
    the CLI's loop (``answer_with_retries``) and each server endpoint (llmproxy.server.endpoints, whose
    requests llmproxy.server.responses runs on the event loop) keep one."""

    def __init__(self, request: ChatRequest, retries: int) -> None:
        self.request = request  # what the attempt now running asks
        self.retries = retries
        self.count = 1  # the attempt now running, from 1

    def again(self, error: OutputParseError) -> bool:
        """Whether the attempt now running, whose answer could not be used (``error``), gets another;
        if so, ``request`` is now the second chance's."""
        if self.count > self.retries:
            return False
        self.request = second_chance(self.request, error, self.count)
        self.count += 1
        return True

    def finished(self, response: ChatCompletion) -> ChatCompletion:
        """``response`` noting how many generations it took."""
        return with_attempts(response, self.count)


def answer_with_retries(
    request: ChatRequest,
    route: Route,
    generate: Callable[[ChatRequest, int], tuple[Plan, Completion]],
    rejected: Callable[[OutputParseError, bool], None] | None = None,
) -> tuple[Plan, ChatCompletion]:
    """The synchronous retry loop: ``generate(request, attempt)`` plans and runs one attempt (``attempt``
    from 1); an answer that cannot be used gets ``route.retries`` more tries, ``rejected(error, again)``
    told of each. The response, and the plan of the attempt that gave it."""
    tries = Attempts(request, route.retries)
    while True:
        prepared, completion = generate(tries.request, tries.count)
        try:
            return prepared, tries.finished(finish(prepared, completion))
        except OutputParseError as exc:
            again = tries.again(exc)
            if rejected is not None:
                rejected(exc, again)
            if not again:
                raise


def chat_completion(request: ChatRequest, route: Route, *, first_message: bool = False) -> ChatCompletion:
    """Run one request through ``route``; an answer that cannot be used gets ``route.retries`` more tries."""

    def generate(asked: ChatRequest, attempt: int) -> tuple[Plan, Completion]:
        prepared = plan(asked, route, first_message=first_message, schemas_checked=attempt > 1)
        return prepared, route.backend.complete(prepared.rendered.prompt, prepared.params)

    return answer_with_retries(request, route, generate)[1]


def with_attempts(response: ChatCompletion, attempts: int) -> ChatCompletion:
    """``response`` noting how many generations it took."""
    if response.llmproxy is not None:
        response.llmproxy.attempts = attempts
    return response


def parse_request(fields: dict[str, Any]) -> ChatRequest:
    """Validate an OpenAI chat request; a bad one raises InvalidRequestError naming the field."""
    for key, known in (("tools", _known_tools), ("functions", _known_functions)):
        value = fields.get(key)
        if isinstance(value, list) and value:
            try:
                fields = {**fields, key: known(value)}
            except ValidationError:
                break  # the whole request's validation names what is wrong
    try:
        return ChatRequest.model_validate(fields)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from exc


# An agent sends the same tools every turn: validated once (with the JSON each definition is known by), by
# their JSON bytes, and shared - read only - by every request that sends them.
@cached_by_json(4 * MIB)
def _known_tools(value: Any) -> list[Tool]:
    return _TOOLS.validate_python(value)


@cached_by_json(4 * MIB)
def _known_functions(value: Any) -> list[FunctionDefinition]:
    return _FUNCTIONS.validate_python(value)


_TOOLS = TypeAdapter(list[Tool])
_FUNCTIONS = TypeAdapter(list[FunctionDefinition])


def _check_logprobs(request: ChatRequest, route: Route) -> None:
    if not request.logprobs:
        raise InvalidRequestError("invalid request: top_logprobs needs logprobs: true", param="top_logprobs")
    if not route.backend.capabilities.logprobs:
        raise UnsupportedRequestError(
            f"logprobs were asked for, but the {route.backend.name} backend does not report them; use a backend "
            f"that does ({', '.join(backends_with('logprobs'))}) or leave logprobs out", param="logprobs")
    if request.stream:
        raise UnsupportedRequestError("logprobs are returned with whole answers only; leave out stream or logprobs",
                                      param="logprobs")


def _choice_logprobs(completion: Completion, top: int) -> ChoiceLogprobs | None:
    if completion.logprobs is None:
        return None
    return ChoiceLogprobs(content=[
        TokenLogprobs(token=t.token, logprob=t.logprob, bytes=list(t.token.encode()),
                      top_logprobs=[TopLogprob(token=s, logprob=lp, bytes=list(s.encode())) for s, lp in t.top[:top]])
        for t in completion.logprobs])


def _check_encodable(prompt: str, request: ChatRequest) -> None:
    """The prompt (and the stop strings, also sent) must be UTF-8: JSON can carry half a UTF-16 pair
    (``"\\ud800"``). One encode in the common case; the field is looked for only when one fails."""
    try:
        prompt.encode("utf-8")
        for stop in request.stop_list():
            stop.encode("utf-8")
    except UnicodeEncodeError:
        refuse_lone_surrogates(request.model_dump(exclude_none=True), "")
        raise InvalidRequestError("invalid request: the request holds a lone surrogate, which is not valid Unicode; "
                                  "send the text as UTF-8") from None


def _check_library_input(messages: Any, request_fields: dict[str, Any]) -> None:
    """Wrong types and misspelt keywords fail here, by name: the server's JSON never reaches Python's
    own errors, and a library caller should not either (``max_token=5`` is not silently ignored)."""
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
        raise InvalidRequestError(
            f"invalid request: messages: must be a list of messages, not {type(messages).__name__}",
            param="messages")
    unknown = sorted(set(request_fields) - set(ChatRequest.model_fields))
    if unknown:
        hints = [f"{name!r} (did you mean {close[0]!r}?)" if (close := get_close_matches(name, ChatRequest.model_fields, 1))
                 else repr(name) for name in unknown]
        raise InvalidRequestError(f"invalid request: unknown argument {', '.join(hints)}", param=unknown[0])


def _check_nesting(fields: dict[str, Any]) -> None:
    """A library caller's values were never read from JSON text, which bounds how deep they nest (the
    server's intake reads its own): they are bounded here, by field, before anything walks them (reading
    the request itself writes its tools as JSON)."""
    for name, value in fields.items():
        if nested_deeper(value, MAX_NESTING - 1):  # the request's own level is one of them
            raise InvalidRequestError(f"invalid request: {name}: arrays and objects nested too deep (more than "
                                      f"{MAX_NESTING} levels); flatten the value", param=name)


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
    preset: str | None = None,
    auth_type: str | None = None,
    auth_key: str | None = None,
    backend_options: dict[str, Any] | None = None,
    retries: int = DEFAULT_RETRIES,
    decide: str | None = None,
    **request_fields: Any,
) -> ChatCompletion:
    """Answer an OpenAI chat request with a local model; the keyword names are MemGPT's.

    ``messages``, ``functions``/``tools`` and the rest may be dicts or llmproxy's pydantic models.
    Extra keyword arguments (``temperature``, ``max_tokens``, ``stop``, ``seed`` ...) are request fields.
    ``endpoint_type`` defaults to the embedded model; ``wrapper`` to ``auto`` (the model's own template,
    else chatml-json); ``grammar`` to the wrapper alias's setting, else ``auto``. ``backend_options`` go to
    the backend's constructor (``connect_timeout``, ``first_token_timeout``, ``read_timeout``, vLLM's
    ``grammar_field``).
    ``retries``: how many more generations an answer that cannot be used gets (told what was wrong)
    before the error is raised. ``decide``: how ``tool_choice: "auto"`` is decided, ``"free"`` (the model
    writes text or a call as it likes) or ``"choose"`` (its first step is a choice between calling and
    answering); default: ``choose`` on the bundled SmolLM2, ``free`` elsewhere (llmproxy.decide).
    ``preset``: a settings preset (``llmproxy settings`` lists them). Generation settings are layered: the
    backend's defaults, the user settings file, the preset, ``settings``, then the request's own fields
    (``temperature``, ``top_p``, ``seed``, ``max_tokens``, ``stop``).
    """
    _check_library_input(messages, request_fields)
    if not isinstance(first_message, bool):
        raise InvalidRequestError(f"first_message must be true or false, not {first_message!r:.60}", param="first_message")
    fields: dict[str, Any] = {"messages": list(messages), "model": model, **request_fields}
    for key, value in (("functions", functions), ("function_call", function_call), ("tools", tools), ("tool_choice", tool_choice)):
        if value is not None:
            fields[key] = value
    _check_nesting(fields)
    request = parse_request(fields)
    route = build_route(
        endpoint_type=endpoint_type,
        endpoint=endpoint,
        model=model,
        wrapper=wrapper,
        grammar=grammar,
        context_window=context_window,
        settings=settings,
        preset=preset,
        function_correction=function_correction,
        auth_type=auth_type,
        auth_key=auth_key,
        backend_options=backend_options,
        retries=retries,
        decide=decide,
    )
    return chat_completion(request, route, first_message=first_message)
