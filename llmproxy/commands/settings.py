"""``llmproxy settings``: the settings presets (and where each came from), how the layers of settings stack,
and ``settings show NAME``: what one preset sets, and with ``--backend`` what that backend gets."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from llmproxy._data import user_config_dir
from llmproxy.backends import BACKEND_NAMES, backend_class
from llmproxy.commands import options as opt
from llmproxy.commands._console import labelled, out
from llmproxy.commands._errors import reported
from llmproxy.presets import KIND, load_preset, preset_names
from llmproxy.settings import merge_layers, set_by, settings_layers, untaken_samplers, user_settings, user_settings_path

app = typer.Typer(
    name="settings",
    invoke_without_command=True,
    add_completion=False,
    rich_markup_mode=None,
)

LAYERS = (
    "Generation settings are layered, each over the ones before: the backend's defaults; the user settings file "
    "({user_file}); a preset (--preset, a config file's preset = \"NAME\", a request's \"preset\" field, which "
    "replaces the model's); the model's own settings (--temperature, --max-tokens, --seed, a config file's "
    "settings = {{...}}, the library's settings=); then a request's own fields (temperature, top_p, seed, "
    "max_tokens, stop)."
)


@app.callback()
def settings(ctx: typer.Context, debug: opt.Debug = False) -> None:
    """List the settings presets: named generation settings (deterministic, precise, creative, MemGPT's
    simple and deterministic_mirostat ...), each with what it is for.

    Choose one with --preset in serve, try, chat and eval, with preset = "NAME" in a config file's model, with
    preset="NAME" in llmproxy.get_chat_completion, or per request with a "preset" field in the request body.
    A preset sits above the user settings file (~/.config/llmproxy/settings.json) and below the model's own
    settings and the request's sampling fields, so "temperature": 0.9 in a request still wins.

    A preset is a TOML file in settings/: a description, its source, and a [settings] table in llmproxy's
    common names (temperature, top_p, top_k, min_p, typical_p, repeat_penalty, presence_penalty,
    frequency_penalty, mirostat, mirostat_tau, mirostat_eta, max_tokens, stop), which each backend
    translates; a [settings.BACKEND] table holds that backend's own keys. A sampler a backend has no
    counterpart for is left out of its requests, with a warning. Your own presets go in
    ~/.config/llmproxy/settings/ (or a settings/ folder on $LLMPROXY_PATH); one named like a built-in
    preset replaces it.

    Examples:

    \b
      llmproxy settings
      llmproxy settings show deterministic_mirostat
      llmproxy settings show creative --backend vllm
    """
    if ctx.invoked_subcommand is not None:
        return
    with reported(debug):
        console = out()
        names = preset_names()
        width = max(map(len, names), default=0) + 2
        for name in names:
            preset = load_preset(name)
            labelled(console, name, preset.description, width)
            if not preset.built_in:
                console.print(" " * width + f"from {preset.origin}", style="dim")
        console.print()
        path = user_settings_path()
        console.print(LAYERS.format(user_file=f"{path}{'' if path.is_file() else ', absent'}"))
        console.print(f"Your own presets: TOML files in {user_config_dir() / KIND}; "
                      "'llmproxy settings show NAME' prints one.")


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="A preset's name, as 'llmproxy settings' lists them.")],
    backend: Annotated[Optional[str], typer.Option(
        "--backend", show_default=False,
        help=f"Show what a model on this backend starts from with the preset: the backend's defaults, the user "
             f"settings file and the preset, each key with the layer it comes from and the name the backend "
             f"gets it under, and the samplers it has no counterpart for. One of {', '.join(BACKEND_NAMES)}.")] = None,
    debug: opt.Debug = False,
) -> None:
    """Print a preset: its file, description and source, and its settings as the file writes them (shared
    keys, then each backend's own table). With --backend, the settings that backend's requests start from.

    Examples:

    \b
      llmproxy settings show deterministic
      llmproxy settings show deterministic_mirostat --backend koboldcpp
    """
    with reported(debug):
        preset = load_preset(name)
        if backend is not None:
            backend_class(backend)  # an unknown name says which there are
        console = out()
        console.print(preset.name, style="bold")
        console.print(preset.description)
        labelled(console, "file", str(preset.origin))
        labelled(console, "source", preset.source or "-")
        if backend is None:
            _print_table(console, "every backend", {k: v for k, v in preset.settings.items() if k not in BACKEND_NAMES})
            for own in (key for key in preset.settings if key in BACKEND_NAMES):
                _print_table(console, own, preset.settings[own])
            return
        _print_for_backend(console, backend, name)


def _print_table(console: Any, title: str, table: dict[str, Any]) -> None:
    console.rule(title, style="dim")
    for key, value in table.items():
        console.print(f"{key} = {_toml(value)}")


def _print_for_backend(console: Any, backend: str, preset: str) -> None:
    layers = settings_layers(backend, user_settings(backend), preset, {})
    merged = merge_layers(layers)
    untaken = untaken_samplers(backend, merged)
    names = backend_class(backend).samplers
    console.rule(f"the {backend} backend, before the model's settings and the request's fields", style="dim")
    width = max(len(f"{key} = {_toml(value)}") for key, value in merged.items()) + 2
    for key, value in merged.items():
        notes = [f"from {set_by(key, layers)}"]
        if key in untaken:
            notes.append(f"left out: {backend} has no counterpart")
        elif names.get(key, key) != key:
            notes.append(f"sent as {names[key]}")
        labelled(console, f"{key} = {_toml(value)}", "; ".join(notes), width)


def _toml(value: Any) -> str:
    """``value`` as a TOML file writes it (JSON's strings, lists and numbers are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False)
