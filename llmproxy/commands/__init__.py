"""The CLI's commands other than ``serve``: one module per command, added to the app by ``register``."""

from __future__ import annotations

import typer

from llmproxy.commands import bfcl, chat, embed, eval_, probe, render, settings, try_, wrappers


def register(app: typer.Typer) -> None:
    """Add ``wrappers``, ``settings``, ``render``, ``try``, ``chat``, ``eval``, ``bfcl``, ``probe`` and ``embed`` to ``app``."""
    app.add_typer(wrappers.app)
    app.add_typer(settings.app)
    app.command("render")(render.render)
    app.command("try")(try_.try_request)
    app.command("chat")(chat.chat)
    app.command("eval")(eval_.eval_command)
    app.command("bfcl")(bfcl.bfcl)
    app.command("probe")(probe.probe)
    app.command("embed")(embed.embed)
