"""A backend that answers from a script and records what it was asked: for pipeline tests."""

from __future__ import annotations

from llmproxy.backends.base import Backend, Capabilities, Completion, GenerationParams


class ScriptedBackend(Backend):
    """Answers with the queued texts, and records what it was asked."""

    name = "scripted"

    def __init__(self, *answers: Completion, tokenizer: bool = False, grammar: bool = False) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, GenerationParams]] = []
        self.capabilities = Capabilities(grammar=grammar, tokenizer=tokenizer)

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        self.calls.append((prompt, params))
        return self.answers.pop(0)

    def count_tokens(self, text: str) -> int:
        return len(text.split())
