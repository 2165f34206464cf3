"""An embedding request as OpenAI's API takes it (POST /v1/embeddings), read and checked field by field.

``input`` is a string, a list of strings, a list of token ids, or a list of token id lists; each input is
non-empty and at most ``MAX_INPUTS`` of them come in one request (OpenAI's own limit: an agent with more
sends several requests). Every check is linear in the body and says what was wrong and what to send: a
10,000-string input is refused by its length, before any of it is looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from llmproxy.backends.base import EmbeddingInput
from llmproxy.errors import InvalidRequestError

MAX_INPUTS = 2048
MAX_TOKEN_ID = 2**31 - 1  # llama.cpp's token type is a 32-bit int
ENCODINGS = ("float", "base64")
KNOWN_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user"})
INPUT_FORMS = ("a string, a list of strings, a list of token ids or a list of token id lists")


@dataclass(frozen=True)
class EmbeddingRequest:
    """What to embed: the inputs in order (texts, or token id tuples), and how to answer."""

    inputs: tuple[EmbeddingInput, ...]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


def read_embedding_request(fields: Any) -> EmbeddingRequest:
    """The request a JSON body holds; InvalidRequestError naming the field that is wrong."""
    if not isinstance(fields, dict):
        raise InvalidRequestError("the body must be a JSON object with an 'input' field", param=None)
    unknown = sorted(set(fields) - KNOWN_FIELDS)
    if unknown:
        raise InvalidRequestError(f"unknown field {unknown[0]!r}; an embedding request takes "
                                  f"{', '.join(sorted(KNOWN_FIELDS))}", param=unknown[0])
    if "input" not in fields:
        raise InvalidRequestError(f"input is required: {INPUT_FORMS}", param="input")
    model = fields.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequestError(f"model must be a string, not {_kind(model)}", param="model")
    encoding = fields.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in ENCODINGS:
        raise InvalidRequestError(f"encoding_format must be 'float' or 'base64', not {encoding!r:.40}",
                                  param="encoding_format")
    user = fields.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidRequestError(f"user must be a string, not {_kind(user)}", param="user")
    return EmbeddingRequest(read_inputs(fields["input"]), model, encoding, _dimensions(fields.get("dimensions")))


def read_inputs(value: Any) -> tuple[EmbeddingInput, ...]:
    """``input`` as a tuple of texts and token id tuples."""
    if isinstance(value, str):
        return (_text(value, None),)
    if not isinstance(value, list):
        raise InvalidRequestError(f"input must be {INPUT_FORMS}, not {_kind(value)}", param="input")
    if not value:
        raise InvalidRequestError("input is an empty list; send at least one string or token id", param="input")
    if len(value) > MAX_INPUTS:
        raise InvalidRequestError(f"input holds {len(value)} items; at most {MAX_INPUTS} go in one request: send "
                                  "the rest in more requests", param="input")
    first = value[0]
    if _is_token(first):  # one input given as token ids
        return (_tokens(value, None),)
    if isinstance(first, str):
        return tuple(_text(item, index) if isinstance(item, str) else _mixed(item, index, "strings")
                     for index, item in enumerate(value))
    if isinstance(first, list):
        return tuple(_tokens(item, index) if isinstance(item, list) else _mixed(item, index, "token id lists")
                     for index, item in enumerate(value))
    raise InvalidRequestError(f"input[0] is {_kind(first)}; input must be {INPUT_FORMS}", param="input")


def _text(text: str, index: int | None) -> str:
    if not text:
        where = "input" if index is None else f"input[{index}]"
        raise InvalidRequestError(f"{where} is an empty string; every input must hold some text", param="input")
    return text


def _tokens(ids: list[Any], index: int | None) -> tuple[int, ...]:
    where = "input" if index is None else f"input[{index}]"
    if not ids:
        raise InvalidRequestError(f"{where} is an empty token list; every input must hold a token", param="input")
    for position, token in enumerate(ids):
        if not _is_token(token):
            raise InvalidRequestError(f"{where}[{position}] is {_kind(token)}; a token id list holds integers from 0 "
                                      f"to {MAX_TOKEN_ID}", param="input")
    return tuple(ids)


def _mixed(item: Any, index: int, kind: str) -> EmbeddingInput:
    raise InvalidRequestError(f"input[{index}] is {_kind(item)}, and input[0] makes input a list of {kind}: "
                              "every item must be of the same kind", param="input")


def _is_token(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_TOKEN_ID  # bool is not a token id


def _dimensions(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise InvalidRequestError(f"dimensions must be a positive integer, not {value!r:.40}", param="dimensions")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "an integer",
             float: "a number", type(None): "null"}
    described = names.get(type(value), type(value).__name__)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        described += f" ({value!r:.20})"
    return described
