"""The note a second chance adds to a request: a user turn that says why the answer before could not be used.

It is llmproxy's own text, not the client's: what reads the client's request (its last user message, its
words) reads past it, and an answer that repeats it is no answer (llmproxy.proxy).
"""

from __future__ import annotations

from llmproxy.types import Message, UserMessage, content_text

NOTE_OPENING = "Your last answer could not be used:"
NOTE_CLOSING = "Answer again, exactly in the format you were asked for."


def second_chance_note(reason: str) -> UserMessage:
    """The note that tells a second chance ``reason``, the checker's message."""
    return UserMessage(role="user", content=f"{NOTE_OPENING} {reason} {NOTE_CLOSING}")


def is_second_chance_note(message: Message) -> bool:
    """Whether ``message`` is such a note."""
    if not isinstance(message, UserMessage):
        return False
    text = content_text(message.content) or ""
    return text.startswith(NOTE_OPENING) and text.endswith(NOTE_CLOSING)
