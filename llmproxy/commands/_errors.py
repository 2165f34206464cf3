"""Failures as one line on stderr: what went wrong and what to do, with a non-zero exit code.

The traceback appears only with ``--debug``. Exit codes: 1 when the backend or the model failed, 2 for
the caller's own mistakes (an unknown wrapper, a bad request file, a missing option: click uses 2 for
those too), 130 after Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from llmproxy.commands._console import err
from llmproxy.errors import ConfigurationError, InvalidRequestError, LLMProxyError, OutputParseError, TemplateError

FAILED = 1
USAGE = 2
INTERRUPTED = 130


def _next_step(exc: LLMProxyError) -> str | None:
    """What to do, for the errors whose message does not already say it."""
    if isinstance(exc, OutputParseError):
        return "try --grammar auto or another --wrapper"
    if isinstance(exc, TemplateError):
        return "fix the wrapper's template ('llmproxy wrappers show NAME' prints it)"
    if type(exc) is InvalidRequestError:  # its subclasses (context window, unsupported) say it already
        return "the request must be an OpenAI chat request (messages, and tools or functions)"
    return None


def message_for(exc: LLMProxyError) -> str:
    """The error's own message, plus the next step where it has none."""
    # OutputParseError.message quotes the raw output; the commands print it in full themselves.
    text = exc.reason if isinstance(exc, OutputParseError) else exc.message
    next_step = _next_step(exc)
    return f"{text.rstrip('.')}; {next_step}" if next_step else text


def fail(message: str, code: int = FAILED) -> typer.Exit:
    """Print ``llmproxy: message`` on stderr; raise the returned Exit to stop with ``code``."""
    err().print(f"llmproxy: {message}", style="red")
    return typer.Exit(code)


@contextmanager
def reported(debug: bool) -> Iterator[None]:
    """Run a command body, turning any failure into one line and an exit code."""
    try:
        yield
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise  # typer's own ways out: already reported, or typer reports them
    except KeyboardInterrupt:
        if debug:
            raise
        raise fail("interrupted", INTERRUPTED) from None
    except LLMProxyError as exc:
        if debug:
            raise
        code = USAGE if isinstance(exc, (ConfigurationError, InvalidRequestError)) else FAILED
        raise fail(message_for(exc), code) from None
    except Exception as exc:  # noqa: BLE001 - a bug: still one line, with the way to the traceback
        if debug:
            raise
        raise fail(f"internal error: {type(exc).__name__}: {exc}; run again with --debug for the traceback") from None
