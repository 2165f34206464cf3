"""Settings presets (settings/, llmproxy.presets): the built-in ones and a user's, where each stands among
the layers of settings, and choosing one in a config file, with a flag and in a library call.
tests/backends/test_preset_translation.py follows a preset into every backend; test_server_presets.py
chooses one per request."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from cli_helpers import FakeLlamaCpp, call_text, invoke

from llmproxy import ConfigurationError, get_chat_completion
from llmproxy._data import user_config_dir
from llmproxy.presets import load_preset, preset_files, preset_names
from llmproxy.server.config import serving
from llmproxy.settings import USER_SETTINGS_ENV, resolve_settings

ROOT = Path(__file__).resolve().parent.parent
HI = [{"role": "user", "content": "Hi"}]
SEND = call_text("send_message", "Greet them.", message="Hello!")
# MemGPT's settings/simple.py at 9681a60 (reference section 5.3), in order.
MEMGPT_STOPS = ["\nUSER:", "\nASSISTANT:", "\nFUNCTION RETURN:", "\nUSER", "\nASSISTANT", "\nFUNCTION RETURN",
                "\nFUNCTION", "\nFUNC", "<|im_start|>", "<|im_end|>", "<|im_sep|>", "\n### ", "\n#", "  }\n}\n"]


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    """``user_file(json_text)`` writes the user settings file."""
    def write(text: str) -> None:
        path = tmp_path / "settings.json"
        path.write_text(text, encoding="utf-8")
        monkeypatch.setenv(USER_SETTINGS_ENV, str(path))
    return write


# --- the presets ---------------------------------------------------------------------------------


def test_every_built_in_preset_loads_and_says_what_it_is_for():
    names = preset_names()
    assert {"simple", "deterministic_mirostat", "deterministic", "precise", "balanced", "creative",
            "mirostat"} <= set(names)
    assert {path.stem for path in (ROOT / "settings").glob("*.toml")} == set(names)  # no user folder in tests
    for name in names:
        preset = load_preset(name)
        assert preset.built_in and preset.origin == ROOT / "settings" / f"{name}.toml"
        assert preset.description.endswith(".") and preset.source and preset.settings
        assert preset.origin.read_text(encoding="utf-8").startswith("# ")  # its intent, in a comment
        for backend in ("llamacpp", "vllm", "webui"):
            resolve_settings(backend, preset=name)  # every value of the right type


def test_memgpt_presets_are_memgpts_own_values():
    assert load_preset("simple").settings == {"stop": MEMGPT_STOPS}
    mirostat = load_preset("deterministic_mirostat").settings
    assert {key: value for key, value in mirostat.items() if not isinstance(value, dict)} == {
        "max_tokens": 250, "temperature": 0, "top_p": 0, "top_k": 1, "typical_p": 1, "repeat_penalty": 1.18,
        "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.1}
    # webui's own parameters, which have no common name, as MemGPT set them, for both webui backends.
    assert mirostat["webui"] == mirostat["webui-legacy"]
    assert {key: mirostat["webui"][key] for key in ("do_sample", "num_beams", "add_bos_token", "tfs")} == {
        "do_sample": False, "num_beams": 1, "add_bos_token": True, "tfs": 1}
    assert len(mirostat["webui"]) == 18


def test_a_user_preset_is_found_and_shadows_the_built_in_one(write_preset):
    path = write_preset("deterministic", 'description = "Mine."\n[settings]\ntemperature = 0.05\n')
    assert load_preset("deterministic").origin == path and not load_preset("deterministic").built_in
    assert resolve_settings("llamacpp", preset="deterministic")["temperature"] == 0.05
    assert load_preset("creative").built_in and "every_sampler" in preset_names()


def test_the_user_config_folder_is_searched_after_llmproxy_path(write_preset, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the suite's own stays empty
    folder = user_config_dir() / "settings"
    assert folder == tmp_path / "config" / "llmproxy" / "settings"
    folder.mkdir(parents=True)
    (folder / "creative.toml").write_text('description = "Config."\n[settings]\ntemperature = 1.5\n')
    (folder / "every_sampler.toml").write_text('description = "Shadowed."\n[settings]\n')
    preset_files.cache_clear()
    assert load_preset("creative").origin == folder / "creative.toml"
    assert load_preset("every_sampler").description != "Shadowed."  # $LLMPROXY_PATH comes first


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(ConfigurationError) as error:
        load_preset("determinstic")
    assert error.value.message.startswith("unknown settings preset 'determinstic'; known presets: balanced, creative, "
                                          "deterministic, deterministic_mirostat, mirostat, precise, simple")
    assert error.value.param == "preset"


@pytest.mark.parametrize(("text", "problem"), [
    ("description = 'x'\n[settings\n", "is not valid TOML"),
    ("description = 'x'\nsetting = {}\n", "unknown key 'setting'"),
    ("[settings]\ntemperature = 0\n", "'description' must be a non-empty string"),
    ("description = 'x'\nsource = 3\n[settings]\n", "'source' must be a string"),
    ("description = 'x'\n", "it needs a [settings] table"),
    ("description = 'x'\n[settings]\ntop_k = 'one'\n", "setting 'top_k' must be an integer"),
    ("description = 'x'\n[settings]\nmirostat = 3\n", "setting 'mirostat' must be 0 (off), 1 or 2"),
    ("description = 'x'\n[settings]\nllamacpp = 5\n", "section 'llamacpp' must be an object of settings"),
])
def test_a_broken_preset_file_is_named_with_what_is_wrong(write_preset, text, problem):
    path = write_preset("broken", text)
    with pytest.raises(ConfigurationError) as error:
        resolve_settings("llamacpp", preset="broken")
    assert str(path) in error.value.message and problem in error.value.message


# --- the layers ----------------------------------------------------------------------------------


def test_each_layer_wins_over_the_ones_below(httpserver, user_file, write_preset):
    """The backend's defaults < the user file < the preset < the call's settings < the request's fields."""
    user_file('{"temperature": 0.5, "top_k": 7, "top_p": 0.5, "seed": 3, "min_p": 0.2, "llamacpp": {"typical_p": 0.8}}')
    write_preset("house", 'description = "x"\n[settings]\ntemperature = 0.1\ntop_k = 1\ntop_p = 1.0\n'
                          'repeat_penalty = 1.0\n[settings.llamacpp]\ntypical_p = 0.95\n[settings.vllm]\nmin_p = 0.9\n')
    fake = FakeLlamaCpp(httpserver, [SEND])
    get_chat_completion(HI, endpoint_type="llamacpp", endpoint=fake.url, wrapper="chatml", preset="house",
                        settings={"top_k": 5}, temperature=0.9)
    (body,) = fake.bodies
    assert body["temperature"] == 0.9  # the request's own field, over every layer
    assert body["top_k"] == 5  # the call's settings, over the preset and the user file
    assert (body["top_p"], body["repeat_penalty"], body["typical_p"]) == (1.0, 1.0, 0.95)  # the preset's
    assert (body["seed"], body["min_p"]) == (3, 0.2)  # the user file's, where nothing above sets them
    assert body["cache_prompt"] is True  # the backend's defaults, under them all


def test_without_a_preset_nothing_changes(httpserver, user_file):
    user_file('{"top_k": 7}')
    fake = FakeLlamaCpp(httpserver, [SEND])
    get_chat_completion(HI, endpoint_type="llamacpp", endpoint=fake.url, wrapper="chatml")
    (body,) = fake.bodies
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.7, 0.95, 7)
    assert "repeat_penalty" not in body and "mirostat" not in body


def test_a_presets_stop_strings_join_the_wrappers(httpserver):
    fake = FakeLlamaCpp(httpserver, [SEND, SEND])
    for preset in (None, "simple"):
        get_chat_completion(HI, endpoint_type="llamacpp", endpoint=fake.url, wrapper="chatml", preset=preset,
                            stop=["\nEND"])
    *wrappers, asked = fake.bodies[0]["stop"]
    assert asked == "\nEND" and "<|im_end|>" in wrappers
    # The wrapper's, then the preset's, then the request's, each once.
    assert fake.bodies[1]["stop"] == list(dict.fromkeys([*wrappers, *MEMGPT_STOPS, "\nEND"]))


def test_a_dropped_sampler_is_logged_once_per_route(caplog):
    """llmproxy serve resolves a model's settings once: its warning comes at start, not per request."""
    config = {"backend": "lmstudio", "endpoint": "http://127.0.0.1:9", "preset": "mirostat"}  # down: no matter
    with caplog.at_level(logging.WARNING, logger="llmproxy.settings"):
        route = serving(None, config).routes["lmstudio"]
        route.settings_for(None), route.settings_for("mirostat")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "mirostat, mirostat_tau, mirostat_eta (from preset 'mirostat')" \
        in record.getMessage()
    assert not {"mirostat", "mirostat_tau", "mirostat_eta"} & set(route.base_settings)


# --- choosing one: library, config file, flags -----------------------------------------------------


def test_the_library_refuses_an_unknown_preset_before_reaching_a_backend():
    with pytest.raises(ConfigurationError, match=r"unknown settings preset 'nope'; known presets: balanced, "):
        get_chat_completion(HI, endpoint_type="llamacpp", endpoint="http://127.0.0.1:9", preset="nope")


def test_a_config_file_names_a_preset_per_model(tmp_path, httpserver):
    fake = FakeLlamaCpp(httpserver, [])
    path = tmp_path / "models.toml"
    path.write_text(f'[models.steady]\nbackend = "llamacpp"\nendpoint = "{fake.url}"\npreset = "deterministic"\n'
                    f'settings = {{ top_p = 0.5 }}\n[models.free]\nbackend = "llamacpp"\nendpoint = "{fake.url}"\n')
    routes = serving(path, {}).routes
    assert (routes["steady"].preset, routes["free"].preset) == ("deterministic", None)
    steady = routes["steady"].base_settings
    assert (steady["temperature"], steady["top_k"], steady["top_p"]) == (0, 1, 0.5)  # its settings tune the preset
    path.write_text(path.read_text().replace('"deterministic"', '"determinism"'))
    with pytest.raises(ConfigurationError) as error:
        serving(path, {})
    assert error.value.message.startswith(f"config file {path}, model 'steady': unknown settings preset 'determinism'; "
                                          "known presets: balanced, creative, deterministic")


@pytest.fixture
def launched(monkeypatch):
    """What ``serve`` hands to uvicorn, instead of serving."""
    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app_, **options: calls.append(app_))
    return calls


def test_serve_takes_a_preset_flag(launched, httpserver, caplog):
    fake = FakeLlamaCpp(httpserver, [])
    with caplog.at_level(logging.INFO, logger="llmproxy.server"):
        result = invoke("serve", *fake.flags, "--preset", "precise")
    assert result.exit_code == 0, result.output
    (route,) = launched[0].state.service.models.routes.values()
    assert route.preset == "precise" and route.base_settings["top_p"] == 0.1
    assert "settings preset precise" in caplog.text
    result = invoke("serve", *fake.flags, "--preset", "precis")
    assert result.exit_code == 2 and len(launched) == 1
    assert result.stderr.startswith("llmproxy: unknown settings preset 'precis'; known presets: ")
    assert "Traceback" not in result.output


def test_try_and_chat_take_a_preset_flag(httpserver):
    fake = FakeLlamaCpp(httpserver, [SEND])
    result = invoke("try", "-m", "Hi", *fake.memgpt_flags, "--preset", "deterministic", "--temperature", "0.3")
    assert result.exit_code == 0, result.output
    assert "preset deterministic" in result.stdout
    assert (fake.bodies[0]["temperature"], fake.bodies[0]["top_k"]) == (0.3, 1)  # the flag over the preset
    result = invoke("chat", *fake.flags, "--preset", "creative", input="Hi\n")
    assert result.exit_code == 0, result.output
    assert (fake.bodies[1]["min_p"], fake.bodies[1]["temperature"]) == (0.1, 1.0)
    result = invoke("try", "-m", "Hi", *fake.flags, "--preset", "nope")
    assert result.exit_code == 2 and "unknown settings preset 'nope'; known presets: balanced" in result.stderr
    assert len(fake.bodies) == 2


# --- llmproxy settings ----------------------------------------------------------------------------


def test_settings_lists_each_preset_and_how_the_layers_stack(write_preset):
    result = invoke("settings")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for name in ("deterministic", "deterministic_mirostat", "simple", "creative"):
        (line,) = [line for line in lines if line.split()[:1] == [name]]
        assert load_preset(name).description in line
    (mine,) = [i for i, line in enumerate(lines) if line.startswith("every_sampler ")]
    assert lines[mine + 1].strip() == f"from {load_preset('every_sampler').origin}"
    text = " ".join(result.stdout.split())
    assert "the backend's defaults; the user settings file" in text and ", absent)" in text
    assert "then a request's own fields" in text


def test_settings_show_prints_a_preset_as_written_and_for_a_backend():
    result = invoke("settings", "show", "deterministic_mirostat")
    assert result.exit_code == 0, result.output
    assert str(ROOT / "settings" / "deterministic_mirostat.toml") in result.stdout
    assert "mirostat_tau = 4\n" in result.stdout and "do_sample = false\n" in result.stdout
    result = invoke("settings", "show", "deterministic_mirostat", "--backend", "vllm")
    assert result.exit_code == 0, result.output
    lines = {line.split("  ")[0]: " ".join(line.split("  ")[1:]).strip() for line in result.stdout.splitlines()}
    assert lines["repeat_penalty = 1.18"] == "from preset 'deterministic_mirostat'; sent as repetition_penalty"
    assert lines["mirostat = 2"] == "from preset 'deterministic_mirostat'; left out: vllm has no counterpart"
    assert lines["top_k = 1"] == "from preset 'deterministic_mirostat'"
    assert "do_sample = false" not in lines  # webui's table is not vLLM's


@pytest.mark.parametrize(("args", "words"), [
    (["show", "nope"], "unknown settings preset 'nope'; known presets: balanced, "),
    (["show", "simple", "--backend", "nope"], "unknown backend 'nope'; choose one of: embedded, llamacpp, "),
])
def test_settings_show_an_unknown_name_is_one_line(args, words):
    result = invoke("settings", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"llmproxy: {words}") and result.stderr.count("\n") == 1


def test_settings_help_explains_presets_and_their_place():
    result = invoke("settings", "--help")
    text = " ".join(result.stdout.split())
    assert "--preset in serve, try, chat and eval" in text and 'a "preset" field in the request body' in text
    assert "above the user settings file" in text and "~/.config/llmproxy/settings/" in text
