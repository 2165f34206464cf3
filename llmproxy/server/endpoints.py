"""The generation endpoints, one small class each, and the stages every request to them goes through.

A request is read (validated, its model's route found) when it arrives; then, once its backend's
lane lets it in (llmproxy.server.lanes):

    draft   render the prompt, with no call to the backend
    plan    with the prompt's token count: the generation parameters, grammar and token budget
    finish  with the backend's completion and its token count: the pipeline's result (a
            ChatCompletion), which ``body`` writes in the endpoint's own wire format

A request is drafted on the event loop, unless it is ``heavy``: its schemas are large enough that
building and checking their grammar, when no cache has it yet, would hold the loop for tens of
milliseconds (a tool of 1,000 properties: 0.3 s); then it is drafted in a worker thread.

A streamed request also gets its event builder once planned. The stages run in that order, once
each: an object holds one request and what its earlier stages made. Chat requests are
llmproxy.proxy's pipeline (``draft``, ``plan_draft``, ``finish``); text completions are
llmproxy.faces.completions'. The other faces (OpenAI's Responses API, Anthropic's Messages
API: llmproxy.server.responses_face, llmproxy.server.messages_face) translate their request into a
chat request and run a ``ChatGeneration`` for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ValidationError

from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.errors import InvalidRequestError, OutputParseError, invalid_request
from llmproxy.proxy import (Attempts, Draft, Plan, check_schemas, draft, finish, parse_request, plan_draft,
                            streams_calls)
from llmproxy.route import Route
from llmproxy.faces.chat.chunks import ChatChunks, Events, OpenAIEvents
from llmproxy.faces.chat.envelope import envelope
from llmproxy.faces.wire import model_json
from llmproxy.server.models import Models
from llmproxy.server.response_store import ResponseStore
from llmproxy.faces.completions.chunks import TextChunks
from llmproxy.faces.completions.request import CompletionRequest, TextPlan, finish_text, plan_text
from llmproxy.tokens import TokenCount
from llmproxy.types import ChatRequest


# Above this, drafting goes to a worker thread (where it fights the loop for the GIL: done for every
# request, that cost 30% of the server's throughput). MemGPT's eight tools hold 119 schema values; a
# dense schema costs ~0.1 ms a value to build and check a grammar for.
HEAVY_SCHEMA_VALUES = 500


@dataclass(frozen=True, slots=True)
class Planned:
    """What the backend is sent; ``grammar`` labels the constraint, for the log."""

    prompt: str
    params: GenerationParams
    grammar: str | None


class Served(Protocol):
    """What a request is read against: the models served, and the stored responses."""

    models: Models
    responses: ResponseStore


class Generation(Protocol):
    """One request to a generation endpoint, in its stages."""

    endpoint: ClassVar[str]  # the log's name for the endpoint
    route: Route
    stream: bool
    heavy: bool  # drafted in a worker thread

    @classmethod
    def read(cls, fields: dict[str, Any], served: Served) -> Generation: ...  # a request body, validated
    @staticmethod
    def error_body(exc: BaseException) -> tuple[int, bytes]: ...  # a failure in the endpoint's own envelope
    def draft(self) -> str: ...  # the prompt, whose tokens are counted for ``plan``
    def plan(self, prompt_tokens: TokenCount) -> Planned: ...
    def chunks(self) -> Events: ...
    def finish(self, completion: Completion, completion_count: TokenCount) -> BaseModel: ...
    def body(self, result: BaseModel) -> bytes: ...  # ``finish``'s result as the endpoint's JSON response
    def sent(self) -> None: ...  # the whole response has gone out (streamed or not)
    # A stream whose request failed before it started: its events, or None for an HTTP error status.
    def failed_stream(self, exc: BaseException) -> list[bytes] | None: ...
    def retry(self, error: OutputParseError) -> bool: ...  # True: draft again, told what was wrong
    def on_route(self, route: Route) -> Generation: ...  # the same request, afresh, for another model


def openai_error_body(exc: BaseException) -> tuple[int, bytes]:
    """``exc`` in OpenAI's error envelope, with its HTTP status."""
    status, body = envelope(exc)
    return status, model_json(body)


class OpenAIFace:
    """What OpenAI's chat and text completion endpoints share: their envelope and JSON bodies."""

    error_body = staticmethod(openai_error_body)

    def body(self, result: BaseModel) -> bytes:
        return model_json(result)

    def sent(self) -> None:
        pass

    def failed_stream(self, exc: BaseException) -> None:
        return None  # OpenAI's clients read an error status


class ChatGeneration(OpenAIFace):
    """POST /v1/chat/completions: chat with function calling, streamed or not.

    llmproxy extension: the body may carry ``"first_message": true`` (MemGPT's first step of a new
    agent: the answer is primed to call ``send_message``).
    """

    endpoint = "chat.completions"

    def __init__(self, request: ChatRequest, route: Route, *, first_message: bool = False,
                 schema_values: int | None = None) -> None:
        self.asked = request  # as the client sent it, before any second chance's note
        self.route = route
        self.stream = request.stream
        self.first_message = first_message
        # The request's one check of its schemas (``schema_values``: its result, for a fallback's generation).
        self.schema_values = check_schemas(request) if schema_values is None else schema_values
        self.heavy = self.schema_values > HEAVY_SCHEMA_VALUES
        self.tries = Attempts(request, route.retries)
        self._draft: Draft | None = None
        self._plan: Plan | None = None

    @classmethod
    def read(cls, fields: dict[str, Any], served: Served) -> ChatGeneration:
        first_message = fields.pop("first_message", False)
        if not isinstance(first_message, bool):
            raise InvalidRequestError("invalid request: first_message: must be true or false", param="first_message")
        request = parse_request(fields)
        return cls(request, served.models.route(request.model), first_message=first_message)

    def draft(self) -> str:
        self._draft = draft(self.request, self.route, first_message=self.first_message, schemas_checked=True)
        return self._draft.rendered.prompt

    def plan(self, prompt_tokens: TokenCount) -> Planned:
        assert self._draft is not None, "plan follows draft"
        self._plan = plan = plan_draft(self._draft, prompt_tokens)
        return Planned(plan.rendered.prompt, plan.params, plan.grammar)

    def chat_chunks(self) -> ChatChunks:
        """The chat chunks of the answer (the other faces translate them into their own events)."""
        assert self._plan is not None, "chunks follow plan"
        options = self.request.stream_options
        return ChatChunks(self._plan.rendered, self.request.model or self.route.name,
                          include_usage=bool(options and options.include_usage), form=self.request.answer_form,
                          stream_calls=streams_calls(self._plan))

    def chunks(self) -> OpenAIEvents:
        return OpenAIEvents(self.chat_chunks())

    @property
    def prompt_tokens(self) -> int:
        """The planned prompt's tokens (as counted before the backend was called)."""
        assert self._plan is not None, "known once planned"
        return self._plan.prompt_tokens.tokens

    def finish(self, completion: Completion, completion_count: TokenCount) -> BaseModel:
        assert self._plan is not None, "finish follows plan"
        return self.tries.finished(finish(self._plan, completion, completion_count))

    @property
    def request(self) -> ChatRequest:
        """What the attempt now running asks: the client's request, or a second chance's."""
        return self.tries.request

    def retry(self, error: OutputParseError) -> bool:
        """An answer that cannot be used gets the route's second chances (llmproxy.proxy.Attempts)."""
        return self.tries.again(error)

    def on_route(self, route: Route) -> ChatGeneration:
        return ChatGeneration(self.asked, route, first_message=self.first_message, schema_values=self.schema_values)


class TextGeneration(OpenAIFace):
    """POST /v1/completions: the prompt goes to the backend as it is, optionally under a grammar."""

    endpoint = "completions"
    heavy = False  # its grammar is checked when planned, within limits that keep that quick

    def __init__(self, request: CompletionRequest, route: Route) -> None:
        self.request = request
        self.route = route
        self.stream = request.stream
        self._plan: TextPlan | None = None

    @classmethod
    def read(cls, fields: dict[str, Any], served: Served) -> TextGeneration:
        try:
            request = CompletionRequest.model_validate(fields)
        except ValidationError as exc:
            raise invalid_request(exc.errors()) from None
        return cls(request, served.models.route(request.model))

    def draft(self) -> str:
        return self.request.prompt  # sent unchanged

    def plan(self, prompt_tokens: TokenCount) -> Planned:
        self._plan = plan = plan_text(self.request, self.route, prompt_tokens)
        return Planned(self.request.prompt, plan.params, plan.grammar)

    def chunks(self) -> OpenAIEvents:
        assert self._plan is not None, "chunks follow plan"
        return OpenAIEvents(TextChunks(self._plan))

    def finish(self, completion: Completion, completion_count: TokenCount) -> BaseModel:
        assert self._plan is not None, "finish follows plan"
        return finish_text(self._plan, completion, completion_count)

    def retry(self, error: OutputParseError) -> bool:
        return False  # a raw completion is not checked, so never unusable

    def on_route(self, route: Route) -> TextGeneration:
        return TextGeneration(self.request, route)


class TranslatedGeneration:
    """A request to another face (llmproxy.faces), translated into a chat request: every stage is its
    ``ChatGeneration``'s; a subclass writes the result (``body``, ``chunks``) in its face's format.
    ``face`` is the translated request: its ``chat`` request and the ``notes`` the response carries."""

    def __init__(self, face: Any, route: Route) -> None:
        self.face = face
        self.chat = ChatGeneration(face.chat, route)

    @property
    def route(self) -> Route:
        return self.chat.route

    @property
    def stream(self) -> bool:
        return self.chat.stream

    @property
    def heavy(self) -> bool:
        return self.chat.heavy

    def draft(self) -> str:
        return self.chat.draft()

    def plan(self, prompt_tokens: TokenCount) -> Planned:
        return self.chat.plan(prompt_tokens)

    def finish(self, completion: Completion, completion_count: TokenCount) -> BaseModel:
        result = self.chat.finish(completion, completion_count)
        if result.llmproxy is not None:
            result.llmproxy.notes = list(self.face.notes)
        return result

    def retry(self, error: OutputParseError) -> bool:
        return self.chat.retry(error)

    def sent(self) -> None:
        pass

    def failed_stream(self, exc: BaseException) -> list[bytes] | None:
        return None
