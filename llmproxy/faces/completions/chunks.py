"""The chunks of a streamed text completion (POST /v1/completions), framed as OpenAI's chat chunks are
(llmproxy.faces.chat.chunks)."""

from __future__ import annotations

from typing import Any

from llmproxy.faces.chat.chunks import sse
from llmproxy.faces.completions.request import TextChoice, TextCompletion, TextPlan


class TextChunks:
    """The chunks of one streamed text completion: the text as it comes, then the finish reason and
    (when asked) the usage."""

    sent_text = True  # a raw completion streams as it comes, and is never retried

    def __init__(self, plan: TextPlan) -> None:
        self.plan = plan

    def _chunk(self, choices: list[TextChoice], **fields: Any) -> TextCompletion:
        return TextCompletion(id=self.plan.id, created=self.plan.created, model=self.plan.model, choices=choices,
                              **fields)

    def opening(self) -> list[TextCompletion]:
        return []

    def feed(self, text: str) -> list[TextCompletion]:
        return [self._chunk([TextChoice(text=text)])] if text else []

    def feed_events(self, text: str) -> list[bytes]:
        return [sse(chunk) for chunk in self.feed(text)]

    def closing(self, response: TextCompletion) -> list[TextCompletion]:
        chunks = [self._chunk([TextChoice(text="", finish_reason=response.choices[0].finish_reason)])]
        options = self.plan.request.stream_options
        if options is not None and options.include_usage:
            chunks.append(self._chunk([], usage=response.usage))
        return chunks
