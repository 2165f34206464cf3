"""Checking at start that a pool's members are interchangeable: each renders the same request into the
same prompt, stop strings and grammar, and counts tokens alike where it has a tokenizer.

Members may be of any backend kind; what must not differ is what the pool computes once for all of
them (the prompt, its constraint, its token count). A member that would differ (its server reports
another chat template for the wrapper ``auto``, it takes no grammar, it runs another tokenizer) is a
configuration error saying which and why. A member that is down at start cannot be compared: it is
taken on trust, with a warning, and starts out of the pool's rotation until a check finds it up. A
member whose server llmproxy starts on demand is not running yet: taken on trust too, with no warning.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from llmproxy.errors import ConfigurationError, LLMProxyError
from llmproxy.proxy import draft, parse_request
from llmproxy.route import Route

logger = logging.getLogger("llmproxy.server")

# A small request with a system turn, a tool and a past call: what every member must render alike.
_SAMPLE = {
    "messages": [{"role": "system", "content": "You are a helpful assistant."},
                 {"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
}
_COUNTED = "Interchangeable members count tokens alike: déjà vu, 東京, 12345, <tool_call>{\"a\": 1}</tool_call>"


def check_members(model: str, members: Sequence[tuple[str, Route]], started: Collection[str] = ()) -> dict[str, str]:
    """Raise a ConfigurationError naming the first member that is not interchangeable with the first; give
    the members that are down at start, each with what its server said. The ``started`` members' servers
    are started on demand: not asked now."""
    (first_name, first), *others = members
    reference = _rendering(first)
    counted = None if first_name in started else _count(first)
    found = None if first_name in started else first.backend.discover()
    down = {} if found is None or found.up else {first_name: found.detail or "down at start"}
    for name, route in others:
        # Known without asking its server: whether its kind of backend takes grammars at all.
        ungrammatical = first.backend.capabilities.grammar and not type(route.backend).capabilities.grammar
        if route.grammar != first.grammar or (first.grammar != "none" and ungrammatical):
            raise ConfigurationError(
                f"member {name!r} ({_where(route)}) takes no grammar (or another: {route.grammar!r}), and member "
                f"{first_name!r} ({_where(first)}) constrains answers with {first.grammar!r}: a pool's members must "
                "constrain alike; set grammar = \"none\" for the model, or serve that member as another model")
        if name in started:
            continue
        found = route.backend.discover()
        if not found.up:
            logger.warning("model %s: member %s is down at start; it is taken to render and count tokens as %s does, "
                           "and gets requests once a check finds it up", model, name, first_name)
            down[name] = found.detail or "down at start"
            continue
        if route.wrapper.name != first.wrapper.name:
            raise ConfigurationError(
                f"member {name!r} ({_where(route)}) would use the wrapper {route.wrapper.name!r}, and member "
                f"{first_name!r} ({_where(first)}) {first.wrapper.name!r}: a pool's members must render requests "
                "alike; name one wrapper for the model, or serve that member as another model")
        if _rendering(route) != reference:
            raise ConfigurationError(
                f"member {name!r} ({_where(route)}) renders requests differently from member {first_name!r} "
                f"({_where(first)}): its server reports another chat template; name one wrapper for the model, "
                "or serve that member as another model")
        theirs = _count(route)
        if counted is not None and theirs is not None and theirs != counted:
            raise ConfigurationError(
                f"member {name!r} ({_where(route)}) counts {theirs} tokens where member {first_name!r} counts "
                f"{counted} for the same text: it runs another model or tokenizer; serve it as another model")
    return down


def _rendering(route: Route) -> tuple[str, tuple[str, ...], object]:
    drafted = draft(parse_request(dict(_SAMPLE)), route)
    return drafted.rendered.prompt, drafted.rendered.stop, drafted.constraint


def _count(route: Route) -> int | None:
    if not route.backend.capabilities.tokenizer:
        return None
    try:
        return route.backend.count_tokens(_COUNTED)
    except LLMProxyError:
        return None  # down, or no tokenizer after all: nothing to compare


def _where(route: Route) -> str:
    return f"{route.backend.name} at {getattr(route.backend, 'endpoint', None) or 'in-process'}"
