"""What stands in for content the model cannot read: a short note where it was, never a failed turn.

A client may send an image (Codex's ``view_image`` result, a screenshot in Claude Code) to a route
whose model reads text only. Refusing it would fail the whole agent turn (llama.cpp answers 400); the
note tells the model something was there, and the face lists the note in the response's
``llmproxy.notes`` so the client can tell too.
"""

from __future__ import annotations


def stand_in(what: str) -> str:
    """The text put in place of ``what`` ("an image", "a PDF document") in the prompt."""
    return f"[{what} was here; this model reads text only]"


def left_out_note(where: str, what: str) -> str:
    """The response's note for content at ``where`` (a request path, ``input[3].content[1]``) replaced."""
    return f"{where}: {what} replaced by a note; the model reads text only"
