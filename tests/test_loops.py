"""Which answers went round in a loop: the tail repeats one unit back to back, long enough to matter."""

from __future__ import annotations

import pytest

from llmproxy.common.loops import MIN_SPAN, looping_unit

# What SmolLM2 wrote under the hermes wrapper, once its grammar kept it inside an argument string.
RUNAWAY = ('{"name": "get_weather", "arguments": {"city" : "Eiger, Germany}}}</tool_call>  # Eiger in Germany. '
           "2018-03-24T09:56:57Z+0000 (UTC) 2018-03-24T19:11:52AMEuronier, Berlin, Germany</tool_call>"
           + "  # Eiger in Germany. 2018-03-24T19:11:52Z+0000 (UTC) 2018-03-24T19:11:52AMEuronier, Berlin, Germany"
             "</tool_call>" * 3 + "  # E")


def test_a_runaway_argument_is_a_loop_and_its_unit_is_the_repeated_line():
    unit = looping_unit(RUNAWAY)
    assert unit is not None and len(unit) == len("  # Eiger in Germany. 2018-03-24T19:11:52Z+0000 (UTC) "
                                                 "2018-03-24T19:11:52AMEuronier, Berlin, Germany</tool_call>")
    assert "Euronier, Berlin" in unit


@pytest.mark.parametrize("text", [
    "a" * MIN_SPAN,  # one token over and over
    "x" * 500 + "The end. " * 8,  # short units: covered by the span
    "intro " + "abcdefghijklmnopqrstuvwxyz" * 3,  # three copies of a long unit, cut anywhere
    "intro " + "abcdefghijklmnopqrstuvwxyz" * 3 + "abcdefg",
])
def test_loops(text):
    assert looping_unit(text) is not None


@pytest.mark.parametrize("text", [
    "",
    "a" * (MIN_SPAN - 1),  # too short to tell
    "intro " + "abcdefghijklmnopqrstuvwxyz" * 2 + "abcdefg",  # two copies and a bit: could be a quote
    '{"city": "Paris", "unit": "celsius", "note": "a long argument that goes on without repeating itself"',
    "ha ha ha ha, then something else entirely at the end of a long enough answer to be looked at",
])
def test_not_loops(text):
    assert looping_unit(text) is None


def test_only_the_tail_matters():
    assert looping_unit("lalala" * 40 + " and then the answer went on to say something new") is None
