"""Pools in the config file: members inherit the model's settings, members of different backend kinds
serve one model, and members that would not render or count a request alike are refused at start, each
error naming the member and why."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from openai import OpenAI
from pool_helpers import VLLMServer, check, slot_servers
from server_helpers import MEMGPT_TOOLS, running

from llmproxy.errors import ConfigurationError
from llmproxy.server.config import Config, serving


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def test_members_take_the_models_settings_and_their_own(tmp_path: Path):
    with slot_servers(2) as (first, second):
        path = write(tmp_path, f'''
[models.qwen]
backend = "llamacpp"
wrapper = "chatml"
first_token_timeout = 9
max_queue = 3
members = [{{ endpoint = "{first.url}" }}, {{ endpoint = "{second.url}", weight = 2, max_running = 4, name = "big" }}]
sticky_imbalance = 5
sticky = false
''')
        served = serving(path, {})
    pool = served.pools["qwen"]
    assert [(m.name, m.weight, m.max_running) for m in pool.members] == [("llamacpp-1", 1.0, 32), ("big", 2.0, 4)]
    assert [m.route.backend.endpoint for m in pool.members] == [first.url, second.url]
    assert all(m.route.backend.ahttp.timeouts.first_token == 9 for m in pool.members)
    assert pool.imbalance == 5 and not pool.sticky and served.routes["qwen"] is pool.members[0].route
    assert served.limits["qwen"].max_running == 36 and served.limits["qwen"].max_queue == 3


def test_a_member_whose_server_reports_another_chat_template_is_refused(tmp_path: Path):
    with slot_servers(2) as (first, second):
        second.template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"
        path = write(tmp_path, f'[models.m]\nbackend = "llamacpp"\nmembers = [{{ endpoint = "{first.url}" }}, '
                               f'{{ endpoint = "{second.url}", name = "odd" }}]\n')
        with pytest.raises(ConfigurationError, match="member 'odd' .* renders requests differently from member "
                                                     "'llamacpp-1'.*another chat template"):
            serving(path, {})


def test_a_member_with_another_tokenizer_is_refused(tmp_path: Path):
    with slot_servers(2) as (first, second):
        second.tokens_per_char = 0.5
        path = write(tmp_path, f'[models.m]\nbackend = "llamacpp"\nwrapper = "chatml"\nmembers = ['
                               f'{{ endpoint = "{first.url}" }}, {{ endpoint = "{second.url}" }}]\n')
        with pytest.raises(ConfigurationError, match="member 'llamacpp-2' .* counts \\d+ tokens where member "
                                                     "'llamacpp-1' counts \\d+ .* another model or tokenizer"):
            serving(path, {})


def test_a_member_that_takes_no_grammar_cannot_join_one_that_does(tmp_path: Path):
    with slot_servers(1) as (llama,):
        path = write(tmp_path, f'[models.m]\nwrapper = "chatml"\nbackend = "llamacpp"\nmembers = ['
                               f'{{ endpoint = "{llama.url}" }}, {{ backend = "lmstudio", endpoint = "{llama.url}" }}]\n')
        with pytest.raises(ConfigurationError, match="member 'lmstudio-2' .* grammar"):
            serving(path, {})


def test_a_member_that_is_down_at_start_is_taken_on_trust(tmp_path: Path, caplog):
    with slot_servers(2) as (first, second):
        second.kill()
        path = write(tmp_path, f'[models.m]\nbackend = "llamacpp"\nwrapper = "chatml"\nmembers = ['
                               f'{{ endpoint = "{first.url}" }}, {{ endpoint = "{second.url}" }}]\n')
        assert len(serving(path, {}).pools["m"].members) == 2
    assert "member llamacpp-2 is down at start" in caplog.text


@pytest.mark.parametrize("members,says", [
    ('[{ endpoint = "http://a:1", name = "x" }, { endpoint = "http://b:1", name = "x" }]', "the same name"),
    ('[{ endpoint = "http://a:1", weight = 0 }]', "weight: Input should be greater than 0"),
    ('[{ endpoint = "http://a:1", colour = "red" }]', "colour: Extra inputs are not permitted"),
    ('[{ backend = "nope", endpoint = "http://a:1" }]', "member 'nope-1': unknown backend 'nope'"),
])
def test_bad_members_are_refused_with_what_is_wrong(tmp_path: Path, members: str, says: str):
    path = write(tmp_path, f'[models.m]\nbackend = "llamacpp"\ncontext_window = 64\nmembers = {members}\n')
    with pytest.raises(ConfigurationError, match=says):
        serving(path, {})


def test_the_readmes_pool_example_is_a_valid_config():
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "members = [" in b)
    config = Config.model_validate(tomllib.loads(block))
    qwen = config.models["qwen"]
    assert [m.weight for m in qwen.members] == [1, 2, 1] and qwen.escalate_to == "big"


def test_a_pool_mixes_backend_kinds_and_balances_by_each_ones_own_report(tmp_path: Path):
    with slot_servers(1, template="") as (llama,):
        vllm = VLLMServer()
        try:
            path = write(tmp_path, f'''
[models.qwen]
backend = "llamacpp"
wrapper = "chatml"
members = [
  {{ endpoint = "{llama.url}" }},
  {{ backend = "vllm", endpoint = "{vllm.url}", model = "Qwen/Qwen3-8B", name = "gpu3" }},
]
''')
            served = serving(path, {})
            with running(served.routes, pools=served.pools, limits=served.limits) as server:
                api = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
                vllm.running, vllm.waiting = 6, 2  # vLLM is busy with other clients' requests
                check(server, "qwen")
                for _ in range(2):
                    call = api.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}],
                                                       tools=MEMGPT_TOOLS).choices[0].message.tool_calls[0]
                    assert call.function.name == "send_message"
                assert (len(llama.bodies), len(vllm.bodies)) == (2, 0)
                llama.busy, vllm.running, vllm.waiting = 4, 0, 0  # now the llama.cpp server is full
                check(server, "qwen")
                api.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}],
                                            tools=MEMGPT_TOOLS, user="someone")
                assert (len(llama.bodies), len(vllm.bodies)) == (2, 1)
                assert vllm.bodies[0]["model"] == "Qwen/Qwen3-8B" and "structured_outputs" in vllm.bodies[0]
                assert vllm.bodies[0]["prompt"] == llama.bodies[0]["prompt"]  # rendered alike
        finally:
            vllm.stop()
