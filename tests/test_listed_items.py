"""The items a request lists after a value it writes (llmproxy.backends._listed_items)."""

from __future__ import annotations

import pytest

from llmproxy.backends._listed_items import items_after, items_left


@pytest.mark.parametrize(("request_text", "value", "items"), [
    ("the resistivity of copper and aluminum", "copper", ["aluminum"]),
    ("the nucleus, mitochondria, and cytoplasm, and can you also describe them", "nucleus",
     ["mitochondria", "cytoplasm"]),
    ("the nucleus, mitochondria, and cytoplasm", "mitochondria", ["cytoplasm"]),
    ("the nucleus, mitochondria, and cytoplasm", "cytoplasm", []),  # the list's last
    ("human HbA1c, normal hemoglobin, and rat hemoglobin and their 3D models", "human HbA1c",
     ["normal hemoglobin", "rat hemoglobin"]),  # "their 3D models" refers back: no item
    ("gold, silver & $1.50 coins", "gold", ["silver", "$1.50 coins"]),  # a decimal point is its number's
    ("Mix yellow and blue colors", "YELLOW", ["blue colors"]),  # case aside
    ("a living room and a kitchen", "living_room", ["kitchen"]),  # underscores for spaces, an article aside
])
def test_the_items_that_follow_a_value_in_a_list(request_text, value, items):
    assert items_after(request_text, value) == items


@pytest.mark.parametrize(("request_text", "value"), [
    ("the humidity in Miami, Florida in the next days", "Miami"),  # a run of commas no " and " ends
    ("Who invented the theory of relativity and in which year?", "theory of relativity"),  # a clause, not an item
    ("the theory of relativity and what it says", "theory of relativity"),
    ("a copper wire of five metres and more", "copper"),  # no separator after the value
    ("copperplate and ink", "copper"),  # a part of a word
    ("copper and a very long item that goes on", "copper"),  # more than three words
])
def test_a_value_in_no_list_has_no_items_after_it(request_text, value):
    assert items_after(request_text, value) == []


def test_the_items_left_are_those_no_value_held_is_or_holds_as_whole_words():
    request = "the price of gold, silver, platinum, and palladium"
    assert items_left(request, "gold", ["gold"]) == ["silver", "platinum", "palladium"]
    assert items_left(request, "gold", ["gold", "Silver", "platinum"]) == ["palladium"]
    assert items_left("Mix yellow and blue colors", "yellow", ["yellow", "blue"]) == []  # blue holds "blue colors"
    assert items_left("copper and aluminium and aluminum oxide", "copper", ["al"]) == ["aluminium"]  # not a word
