"""An embedding request read and checked (llmproxy.faces.embeddings.request), and vectors written as the
request asks (llmproxy.faces.embeddings.response): pure, no server, no model."""

from __future__ import annotations

import base64
import struct
import time

import pytest

from llmproxy.faces.embeddings import MAX_INPUTS, EmbeddingRequest, encoded, read_embedding_request
from llmproxy.errors import InvalidRequestError


@pytest.mark.parametrize(("value", "inputs"), [
    ("one text", ("one text",)),
    (["a", "b c"], ("a", "b c")),
    ([1, 2, 3], ((1, 2, 3),)),
    ([[1, 2], [3]], ((1, 2), (3,))),
])
def test_every_form_of_input_openai_takes(value, inputs):
    assert read_embedding_request({"input": value}).inputs == inputs


def test_the_other_fields():
    read = read_embedding_request({"input": "x", "model": "m", "encoding_format": "base64", "dimensions": 64,
                                   "user": "u"})
    assert read == EmbeddingRequest(("x",), "m", "base64", 64)
    assert read_embedding_request({"input": "x", "encoding_format": None}).encoding_format == "float"


@pytest.mark.parametrize(("body", "param", "words"), [
    ({}, "input", "input is required"),
    ({"input": ""}, "input", "empty string"),
    ({"input": ["a", ""]}, "input", "input[1] is an empty string"),
    ({"input": []}, "input", "empty list"),
    ({"input": [[]]}, "input", "input[0] is an empty token list"),
    ({"input": None}, "input", "not null"),
    ({"input": 7}, "input", "not an integer (7)"),
    ({"input": {"text": "a"}}, "input", "not an object"),
    ({"input": [True]}, "input", "input[0] is true or false"),
    ({"input": [1.5]}, "input", "input[0] is a number (1.5)"),
    ({"input": [-1]}, "input", "input[0] is an integer (-1)"),
    ({"input": [1, 2**31]}, "input", "input[1] is an integer (2147483648)"),
    ({"input": ["a", 1]}, "input", "input[1] is an integer (1), and input[0] makes input a list of strings"),
    ({"input": [1, "a"]}, "input", "input[1] is a string"),
    ({"input": [[1], "a"]}, "input", "input[1] is a string, and input[0] makes input a list of token id lists"),
    ({"input": [[["a"]]]}, "input", "input[0][0] is a list"),
    ({"input": ["a"] * (MAX_INPUTS + 1)}, "input", f"at most {MAX_INPUTS} go in one request"),
    ({"input": "a", "model": 3}, "model", "model must be a string"),
    ({"input": "a", "encoding_format": "hex"}, "encoding_format", "'float' or 'base64'"),
    ({"input": "a", "dimensions": 0}, "dimensions", "positive integer"),
    ({"input": "a", "dimensions": "64"}, "dimensions", "positive integer"),
    ({"input": "a", "dimensions": True}, "dimensions", "positive integer"),
    ({"input": "a", "user": 1}, "user", "user must be a string"),
    ({"input": "a", "inputs": "b"}, "inputs", "unknown field 'inputs'"),
])
def test_each_bad_input_is_refused_naming_its_field(body, param, words):
    with pytest.raises(InvalidRequestError) as refused:
        read_embedding_request(body)
    assert refused.value.param == param and words in refused.value.message, refused.value.message


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(InvalidRequestError, match="JSON object"):
        read_embedding_request(["input"])


def test_hostile_sizes_are_refused_at_once():
    """10,000 strings are refused by their count, before any is read; the largest list allowed is read
    in linear time."""
    started = time.perf_counter()
    with pytest.raises(InvalidRequestError, match="holds 10000 items"):
        read_embedding_request({"input": ["word " * 100] * 10_000})
    read_embedding_request({"input": [list(range(500))] * MAX_INPUTS})
    assert time.perf_counter() - started < 1.0


def test_vectors_as_floats_or_as_openais_base64():
    vector = [0.25, -1.5, 3.0]
    assert encoded(vector, "float") == vector
    assert struct.unpack("<3f", base64.b64decode(encoded(vector, "base64"))) == (0.25, -1.5, 3.0)
