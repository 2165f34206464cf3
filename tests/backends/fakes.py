"""One fake server per registered HTTP backend, each speaking that backend's protocol as
/work/shared/reference/backend_protocols.md describes it: the endpoints discovery asks, the completion
endpoint (whole and streamed, in the backend's own framing), the tokenizer where there is one, and the
error body shape. ``FAKES`` maps each backend name to its fake; the contract test runs the same
assertions against every one of them, so a new backend is tested by adding its fake here.

Each fake also reads a request body back into llmproxy's common names (``Sent``), written from the
protocol, not from the backend's code, so a translation mistake shows up as a difference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from werkzeug import Request, Response

from llmproxy.backends.base import ChatTemplate

from .conftest import Fake, dumps, sse

N_CTX = 4096
PROMPT_TOKENS, COMPLETION_TOKENS = 97, 41


@dataclass(frozen=True)
class Sent:
    """A request body in llmproxy's vocabulary."""

    prompt: str
    max_tokens: int | None
    stop: list[str] | None
    temperature: float | None
    seed: int | None
    grammar: str | None


def token_count(text: str) -> int:
    """What every fake tokenizer answers: one token per word, plus one (a BOS)."""
    return len(text.split()) + 1


class ProtocolFake:
    """A fake server for one backend type, on a conftest ``Fake``."""

    backend: ClassVar[str]
    model: ClassVar[str]  # the model name discovery reports
    context_window: ClassVar[int | None] = N_CTX  # the context size discovery reports
    options: ClassVar[dict[str, Any]] = {}  # constructor options the backend needs
    complete_path: ClassVar[str]
    stream_path: ClassVar[str]
    counts: ClassVar[bool] = True  # whether a whole answer reports token counts
    reports_stop_word: ClassVar[bool] = False  # whether the protocol names the stop string that ended an answer
    # The protocol's sampler fields (beside temperature, top_p and seed), each with llmproxy's name for it.
    sampler_fields: ClassVar[dict[str, str]] = {}

    def __init__(self, fake: Fake) -> None:
        self.fake = fake

    @property
    def url(self) -> str:
        return self.fake.url

    def serve_discovery(self) -> None:
        raise NotImplementedError

    def chat_template(self) -> ChatTemplate | None:
        """The model's chat template as discovery should report it; None where the protocol has none."""
        return None

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:
        """The whole answer ``text``; ``stop_word``: the stop string that ended it (None: the end of
        generation), told only where the protocol has a field for it."""
        raise NotImplementedError

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        raise NotImplementedError

    #: Chunks a stream sends before its first piece of text (a chat stream's role chunk).
    chunks_before_text = 0

    def serve_tokenizer(self) -> None:
        """Only for backends with a tokenizer."""
        raise NotImplementedError

    def serve_error(self, path: str, status: int) -> None:
        """An error reply in the protocol's own body shape."""
        self.fake.json(path, {"error": {"message": "engine failed", "type": "server_error", "code": status}},
                       status=status)

    def sent(self, body: dict[str, Any]) -> Sent:
        raise NotImplementedError

    def samplers(self, body: dict[str, Any]) -> dict[str, Any]:
        """The sampler fields ``body`` sets, by llmproxy's names."""
        return {common: body[field] for field, common in self.sampler_fields.items() if field in body}

    def completion_requests(self) -> list[dict[str, Any]]:
        return [body for path, body in zip(self.fake.paths, self.fake.bodies)
                if path in (self.complete_path, self.stream_path)]


# --- llama.cpp: /completion, SSE without [DONE] ---------------------------------------------


class LlamaCppFake(ProtocolFake):
    backend = "llamacpp"
    model = "Hermes-2-Pro-Mistral-7B.Q4_K_M.gguf"
    complete_path = stream_path = "/completion"
    reports_stop_word = True
    sampler_fields = {"top_k": "top_k", "min_p": "min_p", "typical_p": "typical_p", "repeat_penalty": "repeat_penalty",
                      "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                      "mirostat": "mirostat", "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta"}

    def chat_template(self) -> ChatTemplate:
        return ChatTemplate(text="{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
                            bos_token="<s>", eos_token="<|im_end|>", source=f"GET {self.url}/props",
                            tool_use_text="{% if tools %}{{ tools | tojson }}{% endif %}")

    def serve_discovery(self) -> None:
        self.fake.json("/health", {"status": "ok"}, method="GET")
        template = self.chat_template()
        self.fake.json("/props", {
            "default_generation_settings": {"n_ctx": N_CTX, "params": {"temperature": 0.8}}, "total_slots": 1,
            "model_path": f"/models/{self.model}", "chat_template": template.text,
            "chat_template_tool_use": template.tool_use_text, "bos_token": template.bos_token,
            "eos_token": template.eos_token, "build_info": "b5000", "modalities": {"vision": False},
        }, method="GET")

    def _final(self, content: str, stop_word: str | None) -> dict[str, Any]:
        return {"index": 0, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": self.model,
                "tokens_predicted": COMPLETION_TOKENS, "tokens_evaluated": PROMPT_TOKENS,
                "generation_settings": {"n_ctx": N_CTX}, "has_new_line": True, "truncated": False,
                "stop_type": "eos" if stop_word is None else "word", "stopping_word": stop_word or "",
                "tokens_cached": 0, "timings": {"prompt_n": PROMPT_TOKENS, "predicted_n": COMPLETION_TOKENS}}

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:
        self.fake.json(self.complete_path, self._final(text, stop_word))

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        events = [{"index": 0, "content": piece, "tokens": [], "stop": False, "id_slot": 0,
                   "tokens_predicted": i + 1, "tokens_evaluated": PROMPT_TOKENS} for i, piece in enumerate(pieces)]
        events.append(self._final("", stop_word))
        self.fake.stream(self.stream_path, [b"data: " + dumps(event).encode() + b"\n\n" for event in events])

    def serve_tokenizer(self) -> None:
        self.fake.route("/tokenize", lambda request: Response(
            dumps({"tokens": list(range(token_count(json.loads(request.get_data())["content"])))}),
            content_type="application/json"))

    def sent(self, body: dict[str, Any]) -> Sent:
        return Sent(body["prompt"], body.get("n_predict"), body.get("stop"), body.get("temperature"),
                    body.get("seed"), body.get("grammar"))


# --- koboldcpp: KoboldAI API, a separate stream URL ------------------------------------------


class KoboldCppFake(ProtocolFake):
    backend = "koboldcpp"
    model = "mistral-7b-instruct"
    complete_path = "/api/v1/generate"
    stream_path = "/api/extra/generate/stream"
    sampler_fields = {"top_k": "top_k", "min_p": "min_p", "typical": "typical_p", "rep_pen": "repeat_penalty",
                      "presence_penalty": "presence_penalty", "mirostat": "mirostat", "mirostat_tau": "mirostat_tau",
                      "mirostat_eta": "mirostat_eta"}

    def serve_discovery(self) -> None:
        self.fake.json("/api/v1/model", {"result": f"koboldcpp/{self.model}"}, method="GET")
        self.fake.json("/api/extra/true_max_context_length", {"value": N_CTX}, method="GET")

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:  # "stop" either way
        self.fake.json(self.complete_path, {"results": [{"text": text, "finish_reason": "stop", "logprobs": None,
                                                         "prompt_tokens": PROMPT_TOKENS,
                                                         "completion_tokens": COMPLETION_TOKENS}]})

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        events = [{"token": piece, "finish_reason": "null"} for piece in pieces]  # the string "null"
        events.append({"token": "", "finish_reason": "stop"})  # then the server hangs up: no [DONE]
        self.fake.stream(self.stream_path, [b"event: message\ndata: " + dumps(e).encode() + b"\n\n" for e in events])

    def serve_tokenizer(self) -> None:
        self.fake.route("/api/extra/tokencount", lambda request: Response(
            dumps({"value": token_count(json.loads(request.get_data())["prompt"]), "ids": []}),
            content_type="application/json"))

    def serve_error(self, path: str, status: int) -> None:
        self.fake.json(path, {"detail": {"msg": "Error parsing input.", "type": "bad_input"}}, status=status)

    def sent(self, body: dict[str, Any]) -> Sent:
        return Sent(body["prompt"], body.get("max_length"), body.get("stop_sequence"), body.get("temperature"),
                    body.get("sampler_seed"), body.get("grammar"))


# --- Ollama: /api/generate in raw mode, NDJSON -----------------------------------------------


class OllamaFake(ProtocolFake):
    backend = "ollama"
    model = "dolphin2.2-mistral:7b-q6_K"
    options = {"model": model}
    complete_path = stream_path = "/api/generate"
    sampler_fields = LlamaCppFake.sampler_fields  # inside ``options``

    def samplers(self, body: dict[str, Any]) -> dict[str, Any]:
        return super().samplers(body.get("options") or {})

    def serve_discovery(self) -> None:
        self.fake.json("/api/version", {"version": "0.5.7"}, method="GET")
        self.fake.json("/api/show", {"modelfile": "...", "parameters": f"num_ctx {N_CTX}", "template": "{{ .Prompt }}",
                                     "details": {"family": "llama"}, "model_info": {"llama.context_length": 32768},
                                     "capabilities": ["completion"]})

    def _done(self, response: str) -> dict[str, Any]:
        return {"model": self.model, "created_at": "2024-05-01T10:00:00Z", "response": response, "done": True,
                "done_reason": "stop", "total_duration": 1, "load_duration": 1,
                "prompt_eval_count": PROMPT_TOKENS, "eval_count": COMPLETION_TOKENS}

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:  # done_reason "stop" either way
        self.fake.json(self.complete_path, self._done(text))

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        lines = [{"model": self.model, "created_at": "2024-05-01T10:00:00Z", "response": p, "done": False}
                 for p in pieces] + [self._done("")]
        self.fake.stream(self.stream_path, [dumps(line).encode() + b"\n" for line in lines],
                         content_type="application/x-ndjson")

    def serve_error(self, path: str, status: int) -> None:
        self.fake.json(path, {"error": "llama runner process has terminated"}, status=status)

    def sent(self, body: dict[str, Any]) -> Sent:
        options = body.get("options") or {}
        assert body["raw"] is True and body["model"] == self.model
        return Sent(body["prompt"], options.get("num_predict"), options.get("stop"), options.get("temperature"),
                    options.get("seed"), None)  # Ollama has no grammar field


# --- the OpenAI-compatible completion API (text-generation-webui, LM Studio, vLLM) ------------


def openai_text(text: str, reason: str | None, *, model: str, usage: bool = False,
                choice: dict[str, Any] | None = None) -> dict[str, Any]:
    """A /v1/completions body or chunk; ``choice``: a server's own fields in it (vLLM's ``stop_reason``)."""
    body: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": model,
                            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                                         **(choice or {})}]}
    if usage:
        body["usage"] = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                         "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
    return body


class OpenAICompletionsFake(ProtocolFake):
    complete_path = stream_path = "/v1/completions"
    grammar_field: ClassVar[str | None] = None

    def serve_models(self, **entry: Any) -> None:
        self.fake.json("/v1/models", {"object": "list", "data": [{"id": self.model, "object": "model", **entry}]},
                       method="GET")

    def _stop_reason(self, stop_word: str | None) -> dict[str, Any]:
        return {"stop_reason": stop_word} if self.reports_stop_word else {}

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:
        self.fake.json(self.complete_path, openai_text(text, "stop", model=self.model, usage=True,
                                                       choice=self._stop_reason(stop_word)))

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        usage_chunk = {**openai_text("", None, model=self.model, usage=True), "choices": []}
        chunks = [openai_text(p, None, model=self.model, choice=self._stop_reason(None)) for p in pieces] + [
            openai_text("", "stop", model=self.model, choice=self._stop_reason(stop_word)), usage_chunk]
        self.fake.stream(self.stream_path, sse(*chunks))

    def sent(self, body: dict[str, Any]) -> Sent:
        grammar = body.get(self.grammar_field) if self.grammar_field else None
        return Sent(body["prompt"], body.get("max_tokens"), body.get("stop"), body.get("temperature"),
                    body.get("seed"), grammar)


class WebUIFake(OpenAICompletionsFake):
    backend = "webui"
    model = "TheBloke_dolphin-2.1-mistral-7B-GPTQ"
    context_window = None  # the OpenAI API of text-generation-webui does not tell it
    grammar_field = "grammar_string"
    sampler_fields = {"top_k": "top_k", "min_p": "min_p", "typical_p": "typical_p",
                      "repetition_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
                      "frequency_penalty": "frequency_penalty", "mirostat_mode": "mirostat",
                      "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta"}

    def serve_discovery(self) -> None:
        self.serve_models(created=0, owned_by="user")

    def serve_tokenizer(self) -> None:
        self.fake.route("/v1/internal/token-count", lambda request: Response(
            dumps({"length": token_count(json.loads(request.get_data())["text"])}), content_type="application/json"))


class LMStudioFake(OpenAICompletionsFake):
    backend = "lmstudio"
    model = "lmstudio-community/Meta-Llama-3-8B-Instruct-GGUF"
    sampler_fields = {"top_k": "top_k", "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
                      "frequency_penalty": "frequency_penalty"}

    def serve_discovery(self) -> None:
        self.serve_models(owned_by="organization")
        self.fake.json("/api/v0/models", {"object": "list", "data": [
            {"id": self.model, "object": "model", "type": "llm", "state": "loaded", "max_context_length": N_CTX}]},
            method="GET")

    def serve_error(self, path: str, status: int) -> None:
        self.fake.json(path, {"error": "engine failed"}, status=status)  # a plain string here


class LMStudioLegacyFake(LMStudioFake):
    """LM Studio <= 0.2.8: the whole prompt as one user message to /v1/chat/completions."""

    backend = "lmstudio-legacy"
    complete_path = stream_path = "/v1/chat/completions"

    def _chat(self, delta: dict[str, Any] | None, reason: str | None, *, message: str | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason}
        if message is not None:
            choice["message"] = {"role": "assistant", "content": message}
        else:
            choice["delta"] = delta
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": self.model,
                "choices": [choice],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}}

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:
        self.fake.json(self.complete_path, self._chat(None, "stop", message=text))

    chunks_before_text = 1

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        chunks = [self._chat({"role": "assistant"}, None)] + [self._chat({"content": p}, None) for p in pieces]
        chunks.append(self._chat({}, "stop"))
        self.fake.stream(self.stream_path, sse(*chunks))

    def sent(self, body: dict[str, Any]) -> Sent:
        (message,) = body["messages"]
        assert message["role"] == "user"
        return Sent(message["content"], body.get("max_tokens"), body.get("stop"), body.get("temperature"),
                    body.get("seed"), None)


class VLLMFake(OpenAICompletionsFake):
    backend = "vllm"
    model = "NousResearch/Hermes-2-Pro-Mistral-7B"
    grammar_field = "structured_outputs"
    reports_stop_word = True  # choices[0].stop_reason: the stop string, null at EOS or mid-stream
    sampler_fields = {"top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repeat_penalty",
                      "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty"}

    def serve_discovery(self) -> None:
        self.serve_models(created=1, owned_by="vllm", root=self.model, parent=None, max_model_len=N_CTX,
                          permission=[])
        self.fake.json("/version", {"version": "0.11.0"}, method="GET")

    def serve_tokenizer(self) -> None:
        def tokenize(request: Request) -> Response:
            body = json.loads(request.get_data())
            assert body["model"] == self.model  # vLLM answers only for the model it serves
            count = token_count(body["prompt"])
            return Response(dumps({"count": count, "max_model_len": N_CTX, "tokens": list(range(count))}),
                            content_type="application/json")

        self.fake.route("/tokenize", tokenize)

    def sent(self, body: dict[str, Any]) -> Sent:
        assert body["model"] == self.model
        grammar = (body.get("structured_outputs") or {}).get("grammar")
        return Sent(body["prompt"], body.get("max_tokens"), body.get("stop"), body.get("temperature"),
                    body.get("seed"), grammar)


# --- text-generation-webui's 2023 blocking API: no stream, no counts -------------------------


class WebUILegacyFake(ProtocolFake):
    backend = "webui-legacy"
    model = "TheBloke_dolphin-2.1-mistral-7B-GPTQ"
    context_window = None  # the legacy API does not tell it
    complete_path = stream_path = "/api/v1/generate"
    counts = False
    # The fixed list its build_parameters read (no min_p, no presence or frequency penalty).
    sampler_fields = {"top_k": "top_k", "typical_p": "typical_p", "repetition_penalty": "repeat_penalty",
                      "mirostat_mode": "mirostat", "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta"}

    def serve_discovery(self) -> None:
        self.fake.json("/api/v1/model", {"result": self.model}, method="GET")

    def serve_completion(self, text: str, stop_word: str | None = None) -> None:
        self.fake.json(self.complete_path, {"results": [{"text": text}]})

    def serve_stream(self, pieces: list[str], stop_word: str | None = None) -> None:
        self.serve_completion("".join(pieces))  # it streamed over a WebSocket only; llmproxy asks in one piece

    def serve_tokenizer(self) -> None:
        self.fake.route("/api/v1/token-count", lambda request: Response(
            dumps({"results": [{"tokens": token_count(json.loads(request.get_data())["prompt"])}]}),
            content_type="application/json"))

    def serve_error(self, path: str, status: int) -> None:
        self.fake.raw(path, b"<html><body><h1>500 Internal Server Error</h1></body></html>", status=status,
                      content_type="text/html")  # it had no JSON error bodies

    def sent(self, body: dict[str, Any]) -> Sent:
        return Sent(body["prompt"], body.get("max_new_tokens"), body.get("stopping_strings"),
                    body.get("temperature"), body.get("seed"), body.get("grammar_string"))


FAKES: dict[str, type[ProtocolFake]] = {
    fake.backend: fake
    for fake in (LlamaCppFake, KoboldCppFake, OllamaFake, WebUIFake, WebUILegacyFake, LMStudioFake,
                 LMStudioLegacyFake, VLLMFake)
}
