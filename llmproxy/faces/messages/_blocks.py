"""The content blocks a text model can be shown: text, and what stands in for images and documents.

``readable(block, where, findings)`` takes one decoded block and gives its text for the prompt, or
None for a block of another kind (the caller decides what that kind means). ``Findings`` collects what
the translation replaced (notes for the response) and what it left out (lines for the log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmproxy.faces.content import left_out_note, stand_in
from llmproxy.faces.messages._fields import a_list, a_string, an_object, block_type, optional, path, string_field

# Blocks of one turn are separate paragraphs to the model: Claude Code sends a reminder block and the
# user's words as two blocks, which run together into one sentence if joined with nothing.
PARAGRAPH = "\n\n"


@dataclass
class Findings:
    """What a request's translation changed: ``notes`` name content replaced by a stand-in (the client
    sees them in ``llmproxy.notes``); ``skipped`` name what was left out altogether (for the log)."""

    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def replaced(self, where: str, what: str) -> str:
        self.notes.append(left_out_note(where, what))
        return stand_in(what)

    def skip(self, where: str, what: str) -> None:
        self.skipped.append(f"{where}: {what} left out")


def readable(block: Any, where: str, findings: Findings) -> str | None:
    """The prompt text of a text, image or document block; None for any other kind."""
    kind = block_type(block, where)
    if kind == "text":
        return string_field(block, "text", where)
    if kind == "image":
        return findings.replaced(where, "an image")
    if kind == "document":
        return _document(block, where, findings)
    return None


def _document(block: dict[str, Any], where: str, findings: Findings) -> str:
    """A plain-text document is read as text; a PDF (or a document behind a URL or a file id) cannot be."""
    source = an_object(block.get("source"), path(where, "source"))
    kind = source.get("type")
    if kind == "text":
        text = a_string(source.get("data"), path(where, "source.data"))
    elif kind == "content":
        text = _document_content(source.get("content"), path(where, "source.content"), findings)
    else:
        pdf = source.get("media_type") == "application/pdf" or kind == "url"
        return findings.replaced(where, "a PDF document" if pdf else "a document")
    title = optional(block, "title", a_string, where)
    return f"{title}{PARAGRAPH}{text}" if title else text


def _document_content(content: Any, where: str, findings: Findings) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for index, inner in enumerate(a_list(content, where)):
        text = readable(inner, path(where, index), findings)
        if text is None:
            findings.skip(path(where, index), f"a {inner['type']} block")
        else:
            texts.append(text)
    return PARAGRAPH.join(texts)
