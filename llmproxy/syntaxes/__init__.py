"""Call-syntax registry: the name a wrapper's ``[answer] syntax`` gives -> the class that implements it.

A new syntax is one module here implementing ``llmproxy.syntaxes.base.CallSyntax``, plus its line below.
Also exported for the pipeline: ``split_reasoning`` (a plain answer's reasoning block apart from its
content) and ``text_scanner`` (the same, streamed), from the syntaxes' shared ``_sections``.
"""

from __future__ import annotations

import importlib
from typing import Any

from llmproxy.errors import ConfigurationError
from llmproxy.syntaxes._sections import split_reasoning, text_scanner
from llmproxy.syntaxes.base import CallSyntax

__all__ = ["SYNTAX_NAMES", "create_syntax", "split_reasoning", "text_scanner"]

# name -> (module, class)
_REGISTRY: dict[str, tuple[str, str]] = {
    "memgpt": ("llmproxy.syntaxes.memgpt", "MemGPTSyntax"),
    "json": ("llmproxy.syntaxes.json_objects", "JSONObjectSyntax"),
    "llama3": ("llmproxy.syntaxes.json_objects", "Llama3Syntax"),
    "hermes": ("llmproxy.syntaxes.tagged_json", "HermesSyntax"),
    "mistral": ("llmproxy.syntaxes.tagged_json", "MistralSyntax"),
    "mistral-v11": ("llmproxy.syntaxes.name_args", "NameArgsSyntax"),
    "xml": ("llmproxy.syntaxes.xml_params", "XMLParamsSyntax"),
    "pythonic": ("llmproxy.syntaxes.pythonic", "PythonicSyntax"),
}
SYNTAX_NAMES = tuple(_REGISTRY)


def create_syntax(name: str, options: dict[str, Any], where: str) -> CallSyntax:
    """The syntax ``name`` configured with ``options``; ``where`` names the file for error messages."""
    try:
        module_name, class_name = _REGISTRY[name]
    except KeyError:
        raise ConfigurationError(f"{where}: unknown call syntax {name!r}; choose one of: {', '.join(SYNTAX_NAMES)}") from None
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(**options)
    except TypeError as exc:  # an option the syntax does not take
        raise ConfigurationError(f"{where}: the {name} call syntax does not take these options: {exc}") from None
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc.message}") from None
