"""``llmproxy embed``: embed a few texts with a backend's embedding endpoint (the embedded model by
default) and show what came back: each vector's length and first values, and how alike the texts are."""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated

import typer

from llmproxy.commands import options as opt
from llmproxy.commands._console import labelled, out, step
from llmproxy.commands._errors import USAGE, fail, reported
from llmproxy.embeddings import get_embeddings
from llmproxy.errors import InvalidRequestError

SHOWN_VALUES = 4  # a vector's first values, printed


def embed(
    texts: Annotated[list[str] | None, typer.Argument(
        show_default=False, help="The texts to embed; '-' (or none) reads one text per line from stdin.")] = None,
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    model: opt.Model = None,
    auth_type: opt.AuthType = None,
    auth_key: opt.AuthKey = None,
    dimensions: Annotated[int | None, typer.Option(
        "--dimensions", min=1, show_default=False,
        help="Ask for vectors this long: only a model that can shorten its embeddings gives them (else an "
             "error saying its length).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print OpenAI's embedding list as JSON, for scripts.")]
    = False,
    debug: opt.Debug = False,
) -> None:
    """Embed texts with a backend's embedding endpoint, as POST /v1/embeddings does, and print each vector's
    length and first values, then the cosine similarity of every pair of texts (1: the same direction).

    The embedded default embeds with its bundled SmolLM2-135M (mean pooling: a rough measure of shared
    words and topic; see the README for better embedding models). A server backend embeds with the model
    it serves: llama.cpp started with --embeddings, Ollama with an embedding model (--model
    nomic-embed-text), vLLM with a pooling model, LM Studio with an embedding model loaded.

    Examples:

    \b
      llmproxy embed "I am allergic to peanuts" "What am I allergic to?" "The weather is fine"
      llmproxy embed --backend ollama --model nomic-embed-text "hello"
      printf 'first passage\\nsecond passage\\n' | llmproxy embed --json
    """
    with reported(debug):
        inputs = _read_stdin() if not texts or texts == ["-"] else list(texts)
        if not inputs:
            raise fail("nothing to embed: give texts as arguments, or one per line on stdin", code=USAGE)
        name = backend or "embedded"
        with step(f"embedding {len(inputs)} text(s) with {name}"):
            try:
                answer = get_embeddings(inputs, endpoint_type=name, endpoint=endpoint, model=model,
                                        dimensions=dimensions, auth_type=opt.auth_type_for(auth_type, auth_key),
                                        auth_key=auth_key)
            except InvalidRequestError as exc:  # it says what to send (the chat commands' hint would not fit)
                raise fail(exc.message, code=USAGE) from None
        if json_output:
            typer.echo(json.dumps(answer.model_dump(exclude_none=True)))
            return
        vectors = [list(item.embedding) for item in answer.data]  # floats: the default encoding
        console = out()
        labelled(console, "backend", name)
        labelled(console, "tokens", f"{answer.usage.prompt_tokens}" + (" (estimated)" if answer.llmproxy and
                                                                     answer.llmproxy.estimated_usage else ""))
        for index, (text, vector) in enumerate(zip(inputs, vectors)):
            values = ", ".join(f"{value:+.4f}" for value in vector[:SHOWN_VALUES])
            labelled(console, f"[{index}]", f"{len(vector)} dimensions [{values}, ...]  {text[:60]!r}")
        for first in range(len(vectors)):
            for second in range(first + 1, len(vectors)):
                similarity = cosine(vectors[first], vectors[second])
                labelled(console, "similarity", f"[{first}] ~ [{second}]  {similarity:.3f}")


def cosine(one: list[float], other: list[float]) -> float:
    norms = math.sqrt(sum(v * v for v in one)) * math.sqrt(sum(v * v for v in other))
    return sum(a * b for a, b in zip(one, other)) / norms if norms else 0.0


def _read_stdin() -> list[str]:
    return [line.rstrip("\n") for line in sys.stdin if line.strip()]
