"""The embedded backend on the real SmolLM2-135M model through llama-cpp-python."""

from __future__ import annotations

import json
import math

import llama_cpp
import numpy as np
import pytest

import llmproxy
from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.backends.embedded import (
    EmbeddedBackend,
    _LogprobRecorder,
    _stop_word,
    default_model_path,
)
from llmproxy.errors import ConfigurationError, UnsupportedRequestError

PROMPT = "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def backend() -> EmbeddedBackend:
    return EmbeddedBackend()


def test_default_model_is_the_bundled_smollm2():
    path = default_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()


@pytest.mark.model
def test_model_is_loaded_once_and_shared(backend):
    assert EmbeddedBackend()._model is backend._model


def test_chat_template_is_read_from_the_gguf_metadata(backend):
    """Without loading the weights; SmolLM2's template has no tool support (issue 11 injects the tools)."""
    template = backend.chat_template()
    assert template.text.startswith("{% for message in messages %}") and "add_generation_prompt" in template.text
    assert "tools" not in template.text and template.tool_use_text is None
    assert (template.bos_token, template.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert template.source == "the GGUF metadata of SmolLM2-135M-Instruct.Q4_1.gguf"
    assert backend.discover().chat_template == template and backend.probe().chat_template == template


def test_a_file_that_is_not_a_gguf_is_a_clear_error(tmp_path):
    fake = tmp_path / "notes.gguf"
    fake.write_text("not a model")
    with pytest.raises(ConfigurationError, match="could not read the GGUF model .*notes.gguf"):
        EmbeddedBackend(model=str(fake)).discover()


def test_missing_gguf_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigurationError, match="GGUF model file not found"):
        EmbeddedBackend(model=str(tmp_path / "nope.gguf"))


def test_a_model_name_that_is_no_gguf_file_is_a_clear_error_not_the_bundled_model():
    with pytest.raises(ConfigurationError, match="a GGUF file .*not 'qwen2.5-coder'; leave it out for the bundled"):
        EmbeddedBackend(model="qwen2.5-coder")


@pytest.mark.model
def test_length_stop_reason_is_real(backend):
    done = backend.complete(PROMPT, GenerationParams(max_tokens=3, temperature=0.0, extra={"repeat_penalty": 1.0}))
    assert done.finish_reason == "length"
    assert done.completion_tokens == 3
    assert done.prompt_tokens == backend.count_tokens(PROMPT)


@pytest.mark.model
def test_stop_string_stop_reason_is_real(backend):
    done = backend.complete(PROMPT, GenerationParams(max_tokens=64, temperature=0.0, stop=("<|im_end|>",)))
    assert done.finish_reason == "stop"
    assert "<|im_end|>" not in done.text and done.text.strip()


@pytest.mark.model
def test_the_stop_string_that_ended_the_answer_is_named_and_the_end_of_generation_is_not(backend):
    """llama-cpp-python says "stop" for both and cuts the stop string off; the backend tells them apart.
    At temperature 0 the answer is "A colour is ..." and then the end-of-generation token."""
    cut = GenerationParams(max_tokens=8, temperature=0.0, stop=(" purple", " is"), extra={"repeat_penalty": 1.0})
    done = backend.complete(PROMPT, cut)
    assert (done.text, done.finish_reason, done.stop_word) == ("A colour", "stop", " is")
    deltas = list(backend.stream(PROMPT, cut))
    assert "".join(d.text for d in deltas) == "A colour"
    assert deltas[-1].stop_word == " is" and all(d.stop_word is None for d in deltas[:-1])
    # The same model, right after: the tokens of the last answer are not taken for this one's.
    ended = GenerationParams(max_tokens=32, temperature=0.0, stop=(" purple",), extra={"repeat_penalty": 1.0})
    done = backend.complete(PROMPT, ended)
    assert (done.finish_reason, done.stop_word) == ("stop", None) and done.text.startswith("A colour is")
    deltas = list(backend.stream(PROMPT, ended))
    assert deltas[-1].finish_reason == "stop" and all(d.stop_word is None for d in deltas)
    limited = backend.complete(PROMPT, GenerationParams(max_tokens=2, temperature=0.0, stop=(" is",)))
    assert (limited.finish_reason, limited.stop_word) == ("length", None)


def test_stop_word_repeats_llama_cpp_pythons_own_cut():
    """A whole answer is cut at the first stop string of the list that the text holds, a stream at the
    earliest one in the text (the list order breaks a tie); only the last token can complete one."""
    stops = (" delta", "b", "ab")
    assert _stop_word(None, stops, earliest=False) is None  # it ended on end-of-generation
    assert _stop_word(b"alpha", stops, earliest=True) is None  # no stop string in it
    assert _stop_word(b"xab", stops, earliest=False) == "b"
    assert _stop_word(b"xab", stops, earliest=True) == "ab"
    assert _stop_word(b"x\n\n", ("\n\n", "\n"), earliest=True) == "\n\n"
    assert _stop_word(b"x\n\n", ("\n", "\n\n"), earliest=True) == "\n"
    assert _stop_word("caf\u00e9".encode(), ("\u00e9",), earliest=False) == "\u00e9"  # matched as UTF-8 bytes
    assert _stop_word(b"abc", ("", "c"), earliest=True) == "c"  # an empty stop string names nothing


@pytest.mark.model
def test_special_tokens_are_counted_as_single_tokens(backend):
    assert backend.count_tokens("<|im_start|>") <= 2  # one special token (plus BOS where the model adds one)
    assert backend.count_tokens("<\\|im_start|>") > 3  # neutralised text is ordinary characters


@pytest.mark.model
def test_shared_prefix_reuses_the_kv_cache(backend):
    llama = backend._model.llama
    backend.complete(PROMPT, GenerationParams(max_tokens=1, temperature=0.0))
    longer = PROMPT + "Red.<|im_end|>\n<|im_start|>user\nAnother one.<|im_end|>\n<|im_start|>assistant\n"
    llama_cpp.llama_perf_context_reset(llama.ctx)
    backend.complete(longer, GenerationParams(max_tokens=1, temperature=0.0))
    evaluated = llama_cpp.llama_perf_context(llama.ctx).n_p_eval
    total = backend.count_tokens(longer)
    new = total - backend.count_tokens(PROMPT)
    assert evaluated <= new + 2, f"evaluated {evaluated} prompt tokens of {total}; only {new} were new"


@pytest.mark.model
def test_stream_yields_pieces_and_a_final_reason(backend):
    deltas = list(backend.stream(PROMPT, GenerationParams(max_tokens=5, temperature=0.0, extra={"repeat_penalty": 1.0})))
    assert len(deltas) >= 2
    assert deltas[-1].finish_reason == "length"
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert deltas[-1].prompt_tokens == backend.count_tokens(PROMPT)


@pytest.mark.model
def test_unknown_setting_is_a_clear_error(backend):
    with pytest.raises(ConfigurationError, match="not understood by llama-cpp-python"):
        backend.complete(PROMPT, GenerationParams(max_tokens=1, extra={"no_such_knob": 1}))


@pytest.mark.model
def test_get_chat_completion_returns_a_schema_valid_send_message(memgpt_functions):
    """End to end on the real model with MemGPT's eight functions, as an agent calls it."""
    import jsonschema

    messages = [
        {"role": "system", "content": "You are Sam, a cheerful assistant. Reply to the user with send_message."},
        {"role": "user", "content": json.dumps({"type": "user_message", "message": "Hi, I am Ana!", "time": "10:00 AM"})},
    ]
    response = llmproxy.get_chat_completion(
        messages, functions=memgpt_functions, first_message=True, max_tokens=96, temperature=0.2, seed=7,
        wrapper="chatml",  # MemGPT's: every answer is a call
    )
    message = response.choices[0].message
    assert response.choices[0].finish_reason == "function_call"
    assert message.function_call.name == "send_message"
    schema = next(f["parameters"] for f in memgpt_functions if f["name"] == "send_message")
    arguments = json.loads(message.function_call.arguments)
    jsonschema.validate(arguments, schema)
    assert arguments["message"].strip()
    assert response.usage.prompt_tokens > 100 and response.usage.completion_tokens > 0
    assert response.llmproxy.usage_estimated is False


# --- logprobs, recorded while sampling -------------------------------------------------------


def assert_logprobs_are_sound(done: Completion, top: int) -> None:
    """What holds for any generation: one entry per token of the text, each a log probability, the
    alternatives most likely first, and the token's own value wherever it is among them."""
    assert done.logprobs and "".join(t.token for t in done.logprobs) == done.text
    for token in done.logprobs:
        assert token.logprob <= 0
        assert len(token.top) == top
        values = [logprob for _, logprob in token.top]
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        if token.token in dict(token.top):
            assert dict(token.top)[token.token] == token.logprob


@pytest.mark.model
def test_logprobs_at_temperature_0_are_the_top_token_each_time(backend):
    done = backend.complete(PROMPT, GenerationParams(max_tokens=5, temperature=0.0, logprobs=3,
                                                     extra={"repeat_penalty": 1.0}))
    assert done.finish_reason == "length" and len(done.logprobs) == done.completion_tokens == 5
    assert_logprobs_are_sound(done, top=3)
    assert all(t.top[0] == (t.token, t.logprob) for t in done.logprobs)


@pytest.mark.model
def test_logprobs_leave_out_the_end_of_generation_token(backend):
    done = backend.complete(PROMPT, GenerationParams(max_tokens=32, temperature=0.0, logprobs=2,
                                                     extra={"repeat_penalty": 1.0}))
    assert done.finish_reason == "stop" and len(done.logprobs) == done.completion_tokens
    assert_logprobs_are_sound(done, top=2)


@pytest.mark.model
def test_logprobs_are_the_models_own_under_sampling_and_a_grammar(backend):
    """Drawn at temperature 0.7 and forced by a grammar, tokens the model ranks low still report the
    model's own (unconstrained) probability: the first, a forced "Z", is not among its top two."""
    done = backend.complete(PROMPT, GenerationParams(max_tokens=6, temperature=0.7, seed=2, logprobs=2,
                                                     grammar='root ::= "Zq" [a-z]+'))
    assert done.text.startswith("Zq") and len(done.logprobs) == done.completion_tokens
    assert_logprobs_are_sound(done, top=2)
    assert done.logprobs[0].token == "Z" and "Z" not in dict(done.logprobs[0].top)
    assert done.logprobs[0].logprob < done.logprobs[0].top[-1][1]


@pytest.mark.model
def test_logprobs_stop_with_the_text_a_stop_string_cut(backend):
    """The output would be "A colour is ..."; cut at " is", it reports "A" and " colour" only."""
    done = backend.complete(PROMPT, GenerationParams(max_tokens=8, temperature=0.0, stop=(" is",), logprobs=0,
                                                     extra={"repeat_penalty": 1.0}))
    assert done.text == "A colour"
    assert [(t.token, t.top) for t in done.logprobs] == [("A", ()), (" colour", ())]


@pytest.mark.model
def test_logprobs_only_when_asked_for(backend):
    done = backend.complete(PROMPT, GenerationParams(max_tokens=2, temperature=0.0))
    assert done.logprobs is None and backend._model.llama.on_sample is None


@pytest.mark.model
def test_get_chat_completion_returns_logprobs_from_the_embedded_model():
    """OpenAI's layout, one entry per token of the raw output the answer was read from."""
    hi = [{"role": "user", "content": "Say hi."}]
    response = llmproxy.get_chat_completion(hi, logprobs=True, top_logprobs=2, max_tokens=8, temperature=0)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens
    assert "".join(t.token for t in content) == response.llmproxy.raw_output
    for token in content:
        assert token.logprob <= 0 and token.bytes == list(token.token.encode())
        values = [t.logprob for t in token.top_logprobs]
        assert len(values) == 2 and values == sorted(values, reverse=True)
    with pytest.raises(UnsupportedRequestError, match="logprobs are returned with whole answers only"):
        llmproxy.get_chat_completion(hi, logprobs=True, stream=True)


class _Pieces:
    """Stands in for ``Llama`` where the recorder only detokenizes."""

    def __init__(self, pieces: dict[int, bytes]) -> None:
        self.pieces = pieces

    def detokenize(self, tokens: list[int]) -> bytes:
        return b"".join(self.pieces[t] for t in tokens)


def test_logprob_recorder_takes_the_log_softmax_of_the_logits():
    logits = np.array([1.0, 3.0, 2.0, -1.0], dtype=np.single)
    recorder = _LogprobRecorder(top=2)
    recorder(2, logits)
    expected = logits.astype(float) - math.log(np.exp(logits.astype(float)).sum())
    ((token, logprob, top),) = recorder.steps
    assert token == 2 and math.isclose(logprob, expected[2], rel_tol=1e-6)
    assert [i for i, _ in top] == [1, 2] and top[1][1] == logprob
    assert math.isclose(top[0][1], expected[1], rel_tol=1e-6)


def test_logprob_recorder_keeps_the_tokens_of_the_text():
    """Not the end-of-generation token (no text); a character split across tokens shows as U+FFFD."""
    llama = _Pieces({0: b"caf", 1: b"\xc3", 2: b"\xa9", 3: b"!", 4: b""})
    recorder = _LogprobRecorder(top=1)
    for token in (0, 1, 2, 3, 4):
        recorder(token, np.zeros(5, dtype=np.single))
    assert [t.token for t in recorder.logprobs(llama, "café!")] == ["caf", "\ufffd", "\ufffd", "!"]
    assert [t.token for t in recorder.logprobs(llama, "caf")] == ["caf"]
