"""The text of an item's content: a message's ``content`` or a tool output's ``output``.

Content is a string or a list of parts. Text parts (``input_text``, ``output_text``, ``refusal``) give
their text; an image or a file, which a text model cannot read, gives a stand-in note
(llmproxy.faces.content) and a line in ``notes``; any other part is passed over and listed in
``skipped``. Parts are joined by newlines, so a stand-in never runs into the text beside it.
"""

from __future__ import annotations

import json
from typing import Any

from llmproxy.faces.content import left_out_note, stand_in
from llmproxy.faces.responses._fields import at, fail

TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}


def _unreadable(part: dict[str, Any]) -> str | None:
    """What an image or file part is, in words ("an image", "a file (report.pdf)"); None for others."""
    kind = part.get("type")
    if kind == "input_image":
        return "an image"
    if kind == "input_file":
        name = part.get("filename")
        return f"a file ({name})" if isinstance(name, str) and name else "a file"
    return None


def content_text(item: dict[str, Any], key: str, here: str, notes: list[str], skipped: list[str]) -> str | None:
    """The text of the content ``item[key]`` (the item is at ``here``); None where it is null or absent.

    A list is read part by part; a part that is not an object, or a text part whose text is not a
    string, is a 400 naming it. Other JSON values (a tool's output as an object) are kept as JSON."""
    content = item.get(key)
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False)
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, str):  # a bare string where a part belongs: its meaning is plain
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise fail(_part_at(here, key, index), "must be a content part object")
        kind = part.get("type", "input_text")
        text_key = TEXT_PARTS.get(kind) if isinstance(kind, str) else None  # a type of another kind: unknown
        if text_key is not None:
            text = part.get(text_key)
            if not isinstance(text, str):
                raise fail(at(_part_at(here, key, index), text_key), "must be a string")
            texts.append(text)
        elif (what := _unreadable(part)) is not None:
            texts.append(stand_in(what))
            notes.append(left_out_note(_part_at(here, key, index), what))
        else:
            skipped.append(f"{_part_at(here, key, index)}: content part of type {kind!r} left out")
    return "\n".join(texts)


def _part_at(here: str, key: str, index: int) -> str:
    """Where a part is (``input[3].content[0]``): written only for an error or a note, as most parts
    need neither (a conversation's history has hundreds)."""
    return at(at(here, key), index)
