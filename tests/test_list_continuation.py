"""After each call of a chosen answer whose calls are JSON objects, whether another follows: the model's own
margin, a bias, and whether the request's numbers are all in the calls written
(llmproxy.backends._list_continuation)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from llmproxy.backends._list_continuation import (ListContinuation, ListTokens, amounts, counted_steps, names,
                                                  names_in, number_lists, number_words, numbers, used_amounts)

# A vocabulary of whole pieces (the last is an end-of-generation token): each answer below is written
# token by token from these.
PIECES = ["{", '"name": "f", "arguments": ', '"name": "g", "arguments": ', "}", "}}", "},", "}},", ",", " ", "\n",
          '"a": 20', '"a": 15', '"a": 3',
          ' {', '"s": "}, "', '"s": "Seattle"', '"s": "Boston"', '"s": "Chicago"', '"s": "Seattle, WA"',
          '"a": [20, 10, 5]', '"d": "2022-05-03"', '"d": "05/18/2022"', '"a": 12, "b": 18', '"a": 4, "b": 6',
          *(f'"a": 1000, "r": 0.05, "y": {years}' for years in (10, 20, 30)), '"s": "copper"', '"s": "aluminum"',
          '"s": "copper", "t": "Boston"', '"s": "copper", "t": "aluminum"', '"a": 2018, "b": 2019, "c": 500, "d": 750', '"a": 2, "b": 4',
          '"name": "points_game", "arguments": ', '"name": "h", "arguments": ', "<|end|>"]
END = len(PIECES) - 1
TOKENS = ListTokens.of(PIECES, {END}, ",")
COMMA = PIECES.index(",")


def written(continuation: ListContinuation, *pieces: str) -> None:
    for piece in pieces:
        continuation.accept(PIECES.index(piece))


def call(value: str) -> tuple[str, ...]:
    return "{", '"name": "f", "arguments": ', "{", value, "}}"


def step(continuation: ListContinuation, more: float = 0.0, done: float = 0.0) -> np.ndarray:
    logits = np.zeros(len(PIECES), dtype=np.float32)
    logits[COMMA], logits[END] = more, done
    continuation.adjust(logits)
    return logits


def answer(request: str, *values: str) -> ListContinuation:
    continuation = ListContinuation(TOKENS, PIECES, request, bias=-1.0)
    written(continuation, *call(values[0]))
    for value in values[1:]:
        written(continuation, ",", " {", *call(value)[1:])
    return continuation


def test_numbers_are_read_as_digits_and_as_values():
    assert numbers("from $2,000 to 3000.50, then +7 and -4.") == {"2000", "3000.50", "7", "-4"}
    assert numbers("no digits") == set() and numbers("v2 and x3") == set()
    assert amounts("8 % of 2,000.0 and 3.50, then 8") == Counter({"8": 2, "2000": 1, "3.5": 1})
    asked = Counter({"8": 2, "2000": 1, "3.5": 1})
    assert used_amounts('{"rate": 0.08, "amount": 2000, "n": 7}', asked) == Counter({"8": 1, "2000": 1})
    assert used_amounts('{"a": 2000, "b": 2000}', asked) == Counter({"2000": 1})  # no more than are asked


def test_a_number_and_its_word_of_scale_are_one_value():
    assert numbers("a payout of 50 million USD for 1.267 Billion people and 2 thousand") == {
        "50000000", "1267000000", "2000"}
    assert amounts("50 million, then 50") == Counter({"50000000": 1, "50": 1})
    assert numbers("4 m and 300 K") == {"4", "300"}  # units, not scales


@pytest.mark.parametrize(("values", "goes_on"), [
    (['"a": 20'], True),  # 15 is in no call yet, and the call used 20: go on
    (['"a": 20', '"a": 15'], False),  # every number is in: end
    (['"a": 20', '"a": 3'], False),  # the last call used none not used before: end
    (['"a": 3'], False),  # the first call used none of the request's numbers: end
])
def test_the_requests_numbers_decide_whatever_the_model_prefers(values, goes_on):
    continuation = answer("Play for 20 and 15 minutes.", *values)
    logits = step(continuation, more=-30.0 if goes_on else 30.0)  # the model prefers the other way
    assert (logits[COMMA] > -np.inf, logits[END] > -np.inf) == (goes_on, not goes_on)
    assert continuation.choices[-1] is goes_on


def test_without_numbers_the_models_own_margin_and_the_bias_decide():
    assert step(answer("Play some songs, then more.", '"a": 3'), more=0.5)[COMMA] == -np.inf  # 0.5 - 1: ends
    assert step(answer("Play some songs, then more.", '"a": 3'), more=1.5)[END] == -np.inf  # 1.5 - 1: goes on


def test_a_call_made_again_word_for_word_ends_the_answer():
    assert step(answer("Play some songs, then more.", '"a": 3', '"a": 3'), more=30.0)[COMMA] == -np.inf


def test_the_choice_is_the_next_token_itself():
    logits = step(answer("Play for 20 and 15 minutes.", '"a": 20'))  # goes on
    assert np.isfinite(logits).tolist() == [piece.lstrip().startswith(",") for piece in PIECES]
    logits = step(answer("Play for 20 minutes.", '"a": 20'))  # ends: the end token, not even whitespace
    assert np.isfinite(logits).tolist() == [token == END for token in range(len(PIECES))]


def test_inside_a_call_no_token_may_close_it_and_go_on_in_one():
    continuation = ListContinuation(TOKENS, PIECES, "x", bias=0.0)
    written(continuation, "{", '"name": "f", "arguments": ', "{", '"a": 3')
    logits = step(continuation)  # in the arguments: "}}," would close them and the call, then go on
    assert logits[PIECES.index("}},")] == -np.inf and logits[PIECES.index("},")] == 0.0
    written(continuation, "}")
    logits = step(continuation)
    assert logits[PIECES.index("},")] == -np.inf and logits[PIECES.index("}")] == 0.0
    assert continuation.choices == []


def test_braces_in_strings_are_text():
    continuation = ListContinuation(TOKENS, PIECES, "x", bias=0.0)
    written(continuation, "{", '"name": "f", "arguments": ', "{", '"s": "}, "', "}")  # its arguments closed
    assert step(continuation)[PIECES.index("},")] == -np.inf  # so the call is being closed
    assert continuation.choices == []


def test_names_are_capitalised_runs_and_quoted_text():
    assert names("What is the weather in Seattle, Boston and New York City?") == {"seattle", "boston", "new york city"}
    assert names("Find flights to Paris. I'm in Washington D.C. and use \"ATCG\".") == {"paris", "washington d.c", "atcg"}
    assert names("Calculate the area of a circle at 0°C.") == set()
    assert names("Concerts in Berlin and Paris next Friday, or on Saturday Night") == {
        "berlin", "paris", "saturday night"}  # a day of the week alone is a date's word
    assert names("Parks in Seattle, WA and Los Angeles, CA, and in the USA, UK") == {
        "seattle, wa", "los angeles, ca", "usa", "uk"}  # a place and its state's code are one name
    assert names("\"Can you check if Bulbasaur can learn 'Solar Beam', and then the same for 'Surf'? Thanks.\"") == {
        "bulbasaur", "solar beam", "surf"}  # a quoted question is no name
    assert names("Forests in the Amazon and the Boreal Forests of Canada, the population of Japan") == {
        "amazon", "boreal forests of canada", "japan"}  # "of" between capitalised words is the name's
    assert names_in('{"name": "f", "arguments": {"museum": "Louvre_Museum"}}', {"louvre museum", "paris"}) == {"louvre museum"}
    asked = {"new york city", "vegan salad"}
    assert names_in('{"city": "New York", "diet": "Vegan"}', asked) == {"new york city"}  # most of it, not a word of it


@pytest.mark.parametrize(("values", "goes_on"), [
    (['"s": "Seattle"'], True),  # Boston and Chicago are in no call yet
    (['"s": "Seattle"', '"s": "Boston"', '"s": "Chicago"'], False),  # all are in
    (['"s": "Seattle"', '"s": "Seattle, WA"'], False),  # the last call used no name not used before
])
def test_the_requests_names_decide_as_its_numbers_do(values, goes_on):
    continuation = answer("What is the weather in Seattle, Boston and Chicago?", *values)
    logits = step(continuation, more=-30.0 if goes_on else 30.0)
    assert continuation.choices[-1] is goes_on and bool(logits[COMMA] > -np.inf) == goes_on


def test_fewer_values_left_than_a_call_uses_end_the_answer():
    # the call used three numbers; only the 2 of m/s^2 is left: not enough for another call
    continuation = answer("Start at 20 m/s, accelerate at 10 m/s^2 for 5 s.", '"a": [20, 10, 5]')
    assert step(continuation, more=30.0)[COMMA] == -np.inf


def test_a_number_the_request_writes_twice_counts_twice():
    # 10 and 5 are in the first call; they are asked again beside 3: enough for another call
    continuation = answer("Start at 20 m/s, 10 m/s^2 for 5 s; then at 3 m/s, 10 m/s^2 for 5 s.", '"a": [20, 10, 5]')
    assert step(continuation, more=-30.0)[END] == -np.inf


@pytest.mark.parametrize(("request_text", "goes_on"), [
    ("Start at 20 m/s, 10 m/s^2 for 5 s, and 3 s too.", False),  # 2 and 3 left: fewer than the call used
    ("Start at 20 m/s, 10 m/s^2 for 5 s, then again for 3 s.", True),  # it asks for several: any value left will do
])
def test_a_request_that_asks_for_several_goes_on_while_any_value_is_left(request_text, goes_on):
    logits = step(answer(request_text, '"a": [20, 10, 5]'), more=-30.0 if goes_on else 30.0)
    assert bool(logits[COMMA] > -np.inf) == goes_on


@pytest.mark.parametrize(("request_text", "goes_on"), [
    ("Play some songs, then also show the charts.", True),  # g is asked for too, and not called yet
    ("Play some songs and show the charts.", True),  # a clause that begins another task
    ("Play the songs that top the charts.", False),  # the request does not say it asks for several
])
def test_a_request_that_asks_for_several_goes_on_while_a_function_it_asks_for_is_not_called(request_text, goes_on):
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=-1.0, functions=("f", "g"))
    written(continuation, *call('"a": 3'))
    logits = step(continuation)  # the model's margin alone would end it (0 - 1)
    assert bool(logits[COMMA] > -np.inf) == goes_on
    if goes_on:  # once g is called too, the model's margin decides again
        written(continuation, ",", " {", '"name": "g", "arguments": ', "{", '"a": 3', "}}")
        assert step(continuation)[COMMA] == -np.inf


@pytest.mark.parametrize(("request_text", "offered", "goes_on"), [
    ("Weather in Seattle, Boston for 7 days", 3, False),  # one call asked for: the name left makes none
    ("Weather in Seattle, Boston for 7 days", 1, True),  # one function: the name left asks for another call
    ("Weather in Seattle, then Boston for 7 days", 3, True),  # the request says it asks for several
    ("Weather in Seattle or in Boston for 7 days", 1, False),  # one function, and no list: one call
])
def test_a_request_that_does_not_ask_for_several_gets_one_call_where_several_functions_are_offered_or_it_lists_none(
        request_text, offered, goes_on):
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=-1.0, offered=offered)
    written(continuation, *call('"s": "Seattle"'))
    logits = step(continuation, more=30.0)  # the model would go on
    assert bool(logits[COMMA] > -np.inf) == goes_on


@pytest.mark.parametrize(("request_text", "goes_on"), [
    ("The NBA's record for the most points in one game, and the record in one season.", True),
    ("The NBA's record for the most points in one game.", False),  # the season's part: none
])
def test_several_functions_asked_for_in_parts_of_their_own_ask_for_several_calls(request_text, goes_on):
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=-1.0, functions=("points_game", "points_season"),
                                    offered=2, arguments_of={"points_game": ("league",), "points_season": ("league",)})
    written(continuation, "{", '"name": "points_game", "arguments": ', "{", '"s": "Seattle"', "}}")
    assert bool(step(continuation)[COMMA] > -np.inf) == goes_on  # the model's margin alone would end it


def test_an_answer_that_goes_back_to_the_functions_it_called_twice_in_a_row_is_not_held_to_one_it_did_not():
    continuation = ListContinuation(TOKENS, PIECES, "Play songs, then show the charts, then also the news.", bias=-1.0,
                                    functions=("f", "g", "h"))
    written(continuation, *call('"a": 20'))
    for name, value in (("g", '"a": 15'), ("f", '"a": 3')):
        written(continuation, ",", " {", f'"name": "{name}", "arguments": ', "{", value, "}}")
    assert step(continuation)[COMMA] == 0  # f, g, f: h is still to be called
    written(continuation, ",", " {", '"name": "g", "arguments": ', "{", '"a": 20', "}}")
    assert step(continuation)[COMMA] == -np.inf  # f, g, f, g: round and round; the model's margin ends it


def test_a_comma_between_digits_separates_thousands_only_before_three_digits():
    assert numbers("the factorial of 5,10 and 15, of $2,000,000") == {"5", "10", "15", "2000000"}


def test_a_date_is_a_value_of_its_own_however_a_call_writes_it():
    # The 3, 18 and 2022 of the dates are no numbers a call must hold, nor "May" a name.
    assert step(answer("Book a flight for May 3rd, 2022.", '"d": "2022-05-03"'), more=30.0)[COMMA] == -np.inf
    two_dates = "Book flights for May 3rd, 2022 and May 18th, 2022."  # a list of two: the second is left
    assert step(answer(two_dates, '"d": "2022-05-03"'), more=-30.0)[END] == -np.inf
    assert step(answer(two_dates, '"d": "2022-05-03"', '"d": "05/18/2022"'), more=30.0)[COMMA] == -np.inf


def test_numbers_are_listed_where_only_a_unit_and_the_lists_comma_or_and_stand_between():
    assert number_lists("for 10, 20 and 30 years, at 5%") == [("10", "20", "30")]
    assert number_lists("5m, 10m and $500 and $700") == [("5", "10", "500", "700")]
    assert number_lists("the data 7, 8, 7 and 9") == [("7", "8", "7", "9")]  # in order, each as often as written
    assert number_lists("the factorial of 5, the factorial of 7") == []  # words between: no list


@pytest.mark.parametrize(("values", "goes_on"), [
    (['"a": 1000, "r": 0.05, "y": 10'], True),  # 20 and 30 of the list are in no call yet
    (['"a": 1000, "r": 0.05, "y": 10', '"a": 1000, "r": 0.05, "y": 20'], True),
    (['"a": 1000, "r": 0.05, "y": 10', '"a": 1000, "r": 0.05, "y": 20', '"a": 1000, "r": 0.05, "y": 30'], False),
])
def test_calls_go_through_a_list_of_numbers_though_they_share_the_others(values, goes_on):
    # The first call used 1000, 5 % and 10; only 20 and 30 are left: fewer than it used, yet a list's.
    continuation = answer("An investment of $1000 at 5% for 10, 20 and 30 years.", *values)
    logits = step(continuation, more=-30.0 if goes_on else 30.0)
    assert bool(logits[COMMA] > -np.inf) == goes_on


@pytest.mark.parametrize(("values", "goes_on"), [
    (['"s": "Seattle"'], True),  # of "Seattle and Chicago": Chicago is in no call yet
    (['"s": "Seattle"', '"s": "Chicago"'], False),  # all of the list
])
def test_calls_go_through_a_list_of_names_though_each_function_asked_for_is_called(values, goes_on):
    request_text = "Find the museum in Boston, then the best Seattle and Chicago restaurants."
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=-1.0, functions=("f", "g"))
    written(continuation, "{", '"name": "g", "arguments": ', "{", '"s": "Boston"', "}}")
    for value in values:
        written(continuation, ",", " {", *call(value)[1:])
    logits = step(continuation, more=-30.0 if goes_on else 30.0)
    assert bool(logits[COMMA] > -np.inf) == goes_on


@pytest.mark.parametrize(("enum_values", "values", "goes_on"), [
    ({"s": ("copper", "aluminum")}, ['"s": "copper"'], True),  # aluminum is in no call yet
    ({"s": ("copper", "aluminum")}, ['"s": "copper"', '"s": "aluminum"'], False),  # both are
    ({"s": ("copper",)}, ['"s": "copper"'], False),  # one value written: no list
    ({}, ['"s": "copper"'], False),  # no enum
    ({"a": ("20", "10")}, ['"a": [20, 10, 5]', '"a": [20, 10, 5]'], False),  # an array holds several itself
    ({"s": ("copper", "aluminum"), "t": ("copper", "aluminum")}, ['"s": "copper", "t": "aluminum"'], False),  # held
])
def test_calls_go_through_the_values_of_an_enum_the_request_writes(enum_values, values, goes_on):
    request_text = "The resistance of the copper wire; the aluminum one's too, if you like."
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=-1.0, enum_values=enum_values)
    written(continuation, *call(values[0]))
    for value in values[1:]:
        written(continuation, ",", " {", *call(value)[1:])
    logits = step(continuation, more=-30.0 if goes_on else 30.0)
    assert bool(logits[COMMA] > -np.inf) == goes_on


def test_once_each_function_asked_for_is_called_a_call_more_needs_as_many_new_values():
    request_text = "Find the GCD of 12 and 18. Also find the LCM of 4 and 6, and then 5."
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=0.0, functions=("f", "g"))
    written(continuation, *call('"a": 12, "b": 18'))
    written(continuation, ",", " {", '"name": "g", "arguments": ', "{", '"a": 4, "b": 6', "}}")
    assert step(continuation, more=30.0)[COMMA] == -np.inf  # only the 5 is left, and g used two


@pytest.mark.parametrize(("request_text", "goes_on"), [
    ("The growth from 2018 to 2019. In 2018 it was $500, in 2019 $750. Also the ratio of 2 to 4.", False),
    ("The growth from 2018 to 2019. In 2018 it was $500, in 2019 $750. Also the ratio of 2 to 4, 8, 9.", True),
])
def test_once_each_function_asked_for_is_called_a_call_more_is_for_a_value_no_call_holds(request_text, goes_on):
    # The years are written twice and held once: what is left of them asks for no call of its own.
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=0.0, functions=("f", "g"))
    written(continuation, *call('"a": 2018, "b": 2019, "c": 500, "d": 750'))
    written(continuation, ",", " {", '"name": "g", "arguments": ', "{", '"a": 2, "b": 4', "}}")
    logits = step(continuation, more=-30.0 if goes_on else 30.0)
    assert bool(logits[COMMA] > -np.inf) == goes_on


def test_a_numbers_words_are_the_three_before_it_and_the_two_after():
    assert number_words("John invested $5000 in the fund 5 years ago today.") == [
        {"john", "invest"}, {"fund", "year", "ago"}]


@pytest.mark.parametrize(("values", "goes_on"), [
    (['"s": "copper"'], True),  # aluminum, the list's next item, is in no call yet
    (['"s": "copper"', '"s": "aluminum"'], False),  # the list is done, and one call each was all it asked
    (['"s": "aluminum"'], False),  # the list's last item: nothing follows it
])
def test_a_value_the_request_follows_with_items_of_a_list_asks_for_a_call_each(values, goes_on):
    # One function, no word that asks for several, no names or numbers listed: one call, but for the list.
    continuation = answer("Calculate the resistance of a wire with a resistivity of copper and aluminum", *values)
    logits = step(continuation, more=-30.0 if goes_on else 30.0)  # the model prefers the other way
    assert continuation.choices[-1] is goes_on and bool(logits[COMMA] > -np.inf) == goes_on


def test_a_name_is_counted_as_a_name_not_as_a_lists_item():
    # "Boston, Chicago and Miami" is a list of names: a call that holds Boston uses one of them, and the
    # names' rule counts it; the items' rule leaves names alone, so a model that stops there is not overruled
    # by it, where several functions are offered and one call is asked for.
    continuation = ListContinuation(TOKENS, PIECES, "Ship copper to Boston, Chicago and Miami", bias=-1.0, offered=2)
    written(continuation, *call('"s": "copper", "t": "Boston"'))
    assert step(continuation, more=30.0)[COMMA] == -np.inf


def test_a_request_counts_out_its_tasks_with_ordinal_words():
    assert counted_steps("First, find the GCD. Secondly, the LCM. Then the sum. Finally, the product.") == 3
    assert counted_steps("The first car starts from rest; the second car at 20 m/s, and the third at 30.") == 3
    assert counted_steps("Second, find the LCM.") == 0  # no count begun
    assert counted_steps("Find the first prime after 100.") == 1


@pytest.mark.parametrize(("values", "goes_on"), [
    (['"a": 12, "b": 18'], True),  # the request's numbers are all used, but it counts two tasks
    (['"a": 12, "b": 18', '"s": "copper"'], False),  # two calls: the count is met, and nothing is left
])
def test_calls_go_on_while_fewer_than_the_tasks_a_request_counts_out(values, goes_on):
    continuation = answer("First, find the GCD of 12 and 18. Second, the same for the pair on my list.", *values)
    logits = step(continuation, more=-30.0 if goes_on else 30.0)  # the model prefers the other way
    assert continuation.choices[-1] is goes_on and bool(logits[COMMA] > -np.inf) == goes_on
