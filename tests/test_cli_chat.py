"""``llmproxy chat``, fed through stdin: a fake llama.cpp server scripts the model's calls, so the memory
functions, the feedback of their results and the end of each turn are checked exactly; the embedded
model checks the real thing end to end."""

from __future__ import annotations

import pytest

import signal
import subprocess
import time
from pathlib import Path

from cli_helpers import FakeLlamaCpp, call_text, command, invoke, process_env, run

REMEMBER = call_text("remember", "The user has a cat.", fact="The user's cat is called Tom.")
SEARCH = call_text("search_memory", "I saved this before.", query="cat")
REPLY_SAVED = call_text("send_message", "Saved it.", message="Nice, I will remember Tom!")
REPLY_FOUND = call_text("send_message", "Found it.", message="Your cat is called Tom.")


def test_chat_runs_the_functions_and_feeds_their_results_back(httpserver):
    fake = FakeLlamaCpp(httpserver, [REMEMBER, REPLY_SAVED, SEARCH, REPLY_FOUND])
    result = invoke("chat", *fake.flags, input="My cat is called Tom.\n\nWhat is my cat called?\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "you> My cat is called Tom.\n"
        "  thinks The user has a cat.\n"
        '  calls  remember {"fact": "The user\'s cat is called Tom."}\n'
        '  result {"status": "OK", "message": "Saved: The user\'s cat is called Tom."}\n'
        "  thinks Saved it.\n"
        "assistant> Nice, I will remember Tom!\n"
        "you> \n"
        "you> What is my cat called?\n"
        "  thinks I saved this before.\n"
        '  calls  search_memory {"query": "cat"}\n'
        '  result {"status": "OK", "message": "The user\'s cat is called Tom."}\n'
        "  thinks Found it.\n"
        "assistant> Your cat is called Tom.\n"
    )
    assert len(fake.bodies) == 4  # the empty line asked nothing
    # Each step sees the whole conversation so far, function results included.
    assert 'Saved: The user\'s cat is called Tom.' in fake.bodies[1]["prompt"]
    assert "Nice, I will remember Tom!" in fake.bodies[2]["prompt"]
    assert fake.bodies[3]["prompt"].count("The user's cat is called Tom.") == 3  # call, result, search result


def test_chat_stops_a_turn_after_max_steps_and_survives_bad_output(httpserver):
    fake = FakeLlamaCpp(httpserver, [REMEMBER, REMEMBER, "not a call at all", REPLY_FOUND])
    result = invoke("chat", *fake.flags, "--max-steps", "2", "--retries", "0", input="one\ntwo\nthree\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "  error  no message after 2 calls; --max-steps allows more\nyou> two\n" in out
    assert "  error  The model's output holds no usable JSON object (the model wrote text where the function name belongs: 'not a call at all')" in out
    assert "raw output: 'not a call at all'\nyou> three\n" in out  # the turn ends; the chat goes on
    assert out.endswith("assistant> Your cat is called Tom.\n")


def test_chat_backend_down_is_one_line():
    result = invoke("chat", "--backend", "llamacpp", "--endpoint", "http://127.0.0.1:9", input="hi\n")
    assert result.exit_code == 1
    assert "could not connect to llamacpp" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.model
def test_chat_embedded_as_a_process_with_piped_stdin():
    result = run("chat", "--seed", "7", "--max-tokens", "80", "--max-steps", "2", input="I am Ada.\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "you> I am Ada."
    assert any(line.startswith(("assistant> ", "  calls  ", "  error  ")) for line in lines[1:])
    assert "Traceback" not in result.stderr and "thinking ..." in result.stderr


def wait_until_reading_stdin(pid: int, seconds: float = 10.0) -> None:
    """Until the process is blocked in read(0, ...) (Linux's /proc says so), else a fixed pause: a signal
    sent while it still finishes its turn under a loaded CI machine tests a different moment."""
    syscall = Path(f"/proc/{pid}/syscall")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            number, fd = syscall.read_text().split()[:2]
        except (OSError, ValueError):
            break
        if number == "0" and fd == "0x0":
            return
        time.sleep(0.02)
    time.sleep(0.2)


def test_chat_ends_cleanly_on_ctrl_c(httpserver):
    fake = FakeLlamaCpp(httpserver, [REPLY_SAVED])
    process = subprocess.Popen(command("chat", *fake.flags), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=process_env())
    process.stdin.write("hello\n")
    process.stdin.flush()
    assert process.stdout.readline() == "you> hello\n"
    assert process.stdout.readline() == "  thinks Saved it.\n"
    assert process.stdout.readline() == "assistant> Nice, I will remember Tom!\n"
    wait_until_reading_stdin(process.pid)  # now waiting for the next line
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stdout == "\n"  # only the line break that leaves the ^C line
