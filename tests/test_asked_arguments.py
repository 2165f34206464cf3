"""Which arguments a request asks for in its own words (llmproxy.backends._asked_arguments)."""

from __future__ import annotations

import pytest

from llmproxy.backends._asked_arguments import asked_enums, asked_names, asked_numbers, asked_true
from llmproxy.backends._list_continuation import number_words, worded_numbers


@pytest.mark.parametrize(("request_text", "argument", "asked"), [
    ("Can you also provide a brief description of each protein?", "include_description", True),
    ("the population of turtles, and also the species information", "species", True),
    ("What is the inventor and year of invention of the Telephone?", "want_year", True),  # "want": a switch word
    ("Find the case with docket number 123456. Don't return full text", "full_text", False),  # negated
    ("the forest growth, if we do not include the impact of human activities", "include_human_impact", False),
    ("the forest growth without the human impact", "include_human_impact", False),
    ("Find the proteins of the nucleus.", "include_description", False),  # the request does not name it
    ("Can you include it?", "include", False),  # a switch word alone names nothing
])
def test_a_boolean_is_asked_true_where_the_request_names_it_and_does_not_negate_it(request_text, argument, asked):
    assert (argument in asked_true(request_text, [argument])) is asked


def test_only_the_arguments_named_are_asked():
    arguments = ["include_description", "include_history", "detailed"]
    assert asked_true("the proteins and a short description of each", arguments) == {"include_description"}


def test_an_argument_is_asked_where_the_request_writes_a_value_of_its_enum():
    enums = {"mode": ("transit", "driving"), "amenities": ("Patio", "Wi_Fi"), "size": ("S", "M")}
    assert asked_enums("Directions by public transit, somewhere with wi fi", enums) == {
        "mode": ("transit",), "amenities": ("Wi_Fi",)}
    assert asked_enums("Directions by transitway", enums) == {}  # a word of its own
    assert asked_enums("Size M, please", enums) == {}  # too short to tell
    genotypes = {"genotype": ("AA", "Aa", "aa")}  # two characters: as written, a word of its own
    assert asked_enums("The frequency of the genotypes AA and aa", genotypes) == {"genotype": ("AA", "aa")}
    assert asked_enums("The frequency of AAA, Aaron's", genotypes) == {}
    conditions = {"condition": ("New", "Like New", "Used")}  # "new" within "like new" is not asked on its own
    assert asked_enums("A vintage game, like new", conditions) == {"condition": ("Like New",)}
    assert asked_enums("A new game like new", conditions) == {"condition": ("New", "Like New")}
    assert asked_enums("With wi fi and a patio", enums) == {"amenities": ("Wi_Fi", "Patio")}  # as it writes them


def test_where_no_value_of_an_enum_is_written_as_it_is_one_written_in_another_form_is_asked():
    levels = {"detail_level": ("summary", "detailed")}
    assert asked_enums("Give me detail information about Apple", levels) == {"detail_level": ("detailed",)}
    assert asked_enums("Give me a summary, in detail", levels) == {"detail_level": ("summary",)}  # as written first
    metrics = {"metrics": ("Points", "Rebounds", "Assists")}
    assert asked_enums("Get point and rebound stats", metrics) == {"metrics": ("Points", "Rebounds")}
    assert asked_enums("A gluten-free cookie", {"diet": ("Vegan", "Gluten Free")}) == {"diet": ("Gluten Free",)}
    assert asked_enums("Prices for the next 2 weeks", {"duration": ("1 week", "1 month")}) == {}  # numbers differ
    assert asked_enums("Directions by transitway", {"mode": ("transit", "driving")}) == {}  # not an ending
    assert asked_enums("an annual rate, compounded monthly", {"freq": ("annually", "monthly")}) == {
        "freq": ("monthly",)}


@pytest.mark.parametrize(("request_text", "asked"), [
    ("Find a ride to Philadelphia with a maximum cost of $50", {"max_cost"}),  # "maximum cost of $50"
    ("Get me two tickets for the concert", {"num_tickets"}),  # a number written as a word
    ("Find a ride to Philadelphia, cheap", set()),  # no number
    ("Find 2 rides; the cost is low", set()),  # a number, but in another clause than "cost"
])
def test_a_number_argument_is_asked_where_the_request_writes_a_number_beside_its_name_words(request_text, asked):
    around = [*number_words(request_text), *(words for _, words in worded_numbers(request_text))]
    assert asked_numbers(["max_cost", "num_tickets", "source"], around) == asked


def test_a_string_argument_is_asked_where_the_request_writes_a_name_right_before_its_name_words():
    request = "the latest updates for 'Call of Duty' on the 'Playstation' platform for the 'European' region"
    names = {"Call of Duty", "Playstation", "European"}
    assert asked_names(request, names, ("game", "platform", "region", "language")) == {"platform", "region"}
    assert asked_names("the region of Europe", {"Europe"}, ("region",)) == frozenset()  # the name after it: no
