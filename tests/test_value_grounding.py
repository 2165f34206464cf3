"""A chosen call's values held to what the request wrote (llmproxy.backends._value_grounding)."""

from __future__ import annotations

import numpy as np
import pytest

from llmproxy.backends._value_grounding import (ArgumentKinds, GroundingTokens, ValueGrounding, described_choices,
                                                described_examples, formatted_arguments, whole_percentages)
from llmproxy.syntaxes.base import ChoosableFunction

PIECES = ['{"a": ', "Apple", " Inc", '{"s": "', '{"k": [', "2", "20", "200", "0", "00", "5", ",", "}", '"', "Los", " Ang", "eles", "es",
          " Angeles", "San", ", ", "1", "-", "-5", "Mag", "Magnus", "Man", '"b": ',
          '{"name": "f", "arguments": {"a": ', '",', '"}', '"x', '{"s": "Magnus Carlsen", "t": "',
          '{"name": "area_rect", "arguments": {}}', '{"name": "', "area", "_circle", "_rect", "string", "integer",
          '{"name": "f", "arguments": {"s": "', '{"name": "g", "arguments": {"a": ',
          '{"name": "f", "arguments": {"t": "', "Magnus Carlsen", ".", "x",
          " -", " ", "copper", "alu", "aluminum", "minum", "Z", "ub", "ubin", "ach", "dataset", "dataset1",
          "json"]
CALL = '{"name": "f", "arguments": {"a": '
BIAS = 4.0


def changed_by(pieces: list[str], request: str, written: tuple[str, ...], functions: tuple[str, ...] = (),
               arguments: ArgumentKinds | None = None) -> dict[str, float]:
    """The pieces of a vocabulary of ``pieces`` whose logits the grounding changes after ``written``, and
    by how many nats."""
    tokens = GroundingTokens.of(pieces)
    grounding = ValueGrounding(tokens, pieces, request, BIAS, functions, arguments)
    for piece in written:
        grounding.accept(tokens.token_of[piece])
    logits = np.zeros(len(pieces), dtype=np.float32)
    grounding.adjust(logits)
    return {pieces[token]: float(logits[token]) for token in np.flatnonzero(logits)}


def raised_by(request: str, *written: str, functions: tuple[str, ...] = (),
              whole: frozenset[str] = frozenset(), formatted: frozenset[str] = frozenset()) -> dict[str, float]:
    """The pieces the grounding raises after ``written``, and by how many nats."""
    return changed_by(PIECES, request, written, functions, ArgumentKinds(whole, formatted))


def raised(request: str, *written: str, by: float = BIAS, functions: tuple[str, ...] = (),
           whole: frozenset[str] = frozenset()) -> set[str]:
    """The pieces the grounding raises after ``written`` (each ``by`` nats)."""
    found = {piece: change for piece, change in raised_by(request, *written, functions=functions, whole=whole).items()
             if change > 0}
    assert set(found.values()) <= {by}
    return set(found)


def test_a_number_begun_as_the_requests_goes_on_as_it_does():
    assert raised("an initial investment of $2,000 and 5 years", '{"a": ', "2") == {"0", "00"}
    assert raised("$2,000 then $20,005", '{"a": ', "20", by=2 * BIAS) == {"0", "00"}  # both go on from 20
    assert raised("minus -50000 and more", '{"a": ', "-5") == {"0", "00"}  # one digit: a guess
    assert raised("an initial investment of $2,000 and 5 years", '{"a": ', "200", by=2 * BIAS) == {"0"}


def test_a_number_the_request_holds_whole_is_left_to_the_model():
    assert raised("5 times: 20 minutes, or 2000", '{"a": ', "20") == set()  # 20 itself is one of the request's
    assert raised("no numbers here", '{"a": ', "2") == set()


def test_a_string_cut_inside_a_word_of_the_request_goes_on_to_the_words_end_with_twice_the_bias():
    assert raised("Flights to Los Angeles, please", '{"s": "', "Los", " Ang", by=2 * BIAS) == {"eles"}
    assert raised("Flights to Los Angeles, please", '{"k": [', '"', "Los", " Ang", by=2 * BIAS) == {"eles"}  # an item
    assert raised("Two Los Angeleses, please", '{"s": "', "Los", " Ang", "eles") == {"es"}  # a plural's: the bias
    # Where a word of the request ends, the value may well be whole: the model goes on or stops; but not
    # inside a name of several words.
    assert raised("Flights to los angeles, please", '{"s": "', "Los") == set()
    assert raised("Flights to Los Angeles, please", '{"s": "', "Los", by=2 * BIAS) == {" ", " Ang", " Angeles"}
    assert raised("Flights to Los Angeles, please", '{"s": "', "Los", " Angeles") == set()


def test_keys_and_text_the_request_does_not_hold_are_left_alone():
    assert raised("Flights to Los Angeles", '{"s": "', "San") == set()
    assert raised("Los Angeles", '"', "Los", " Ang") == set()  # a string after nothing is no value


def test_a_string_value_may_begin_a_name_of_the_request():
    assert raised("What is the rating of Magnus Carlsen?", '{"s": "', by=BIAS / 2) == {
        "Mag", "Magnus", "Magnus Carlsen"}
    assert raised("what is the rating of that player?", '{"s": "') == set()  # no name written


def test_a_string_value_begins_a_name_no_value_holds_yet_while_there_is_one():
    request = "Compare Magnus Carlsen with Manila Chess Club"
    assert raised(request, '{"s": "', by=BIAS / 2) == {"Mag", "Magnus", "Magnus Carlsen", "Man"}
    assert raised(request, '{"s": "Magnus Carlsen", "t": "', by=BIAS / 2) == {"Man"}
    assert raised("Rate Magnus Carlsen, again", '{"s": "Magnus Carlsen", "t": "', by=BIAS / 2) == {
        "Mag", "Magnus", "Magnus Carlsen"}  # every name is held: any


EMPTY = {'"': -BIAS, '",': -BIAS, '"}': -BIAS}  # a string value's closing quote as its first token

ROUTE_PIECES = ['{"name": "f", "arguments": {"_from": "', '{"name": "f", "arguments": {"destination": "',
                '{"name": "f", "arguments": {"city": "', "Bo", "Boston", "Se", "Seattle", "Mi", "Miami", '", "to": "',
                '"}}, {"name": "f", "arguments": {"_from": "', '"', '",', '"}']


def route_changes(request: str, *written: str) -> dict[str, float]:
    return {piece: change for piece, change in changed_by(ROUTE_PIECES, request, written).items() if change > 0}


def test_an_origin_or_destination_begins_as_the_name_the_request_writes_after_from_or_to():
    request = "Fly from Seattle to Boston, then from Boston to Miami"
    assert route_changes(request, ROUTE_PIECES[0]) == {"Se": BIAS, "Seattle": BIAS}  # the origin: "from Seattle"
    assert route_changes(request, ROUTE_PIECES[1]) == {"Bo": BIAS, "Boston": BIAS}  # a destination: "to Boston"
    assert route_changes("A flight from 'Miami' to 'Boston'", ROUTE_PIECES[0]) == {"Mi": BIAS, "Miami": BIAS}
    assert route_changes(request, ROUTE_PIECES[0], "Seattle", '", "to": "') == {"Bo": BIAS, "Boston": BIAS}
    # The next call's origin: the next name after "from" that no call gave it yet.
    assert route_changes(request, ROUTE_PIECES[0], "Seattle", '", "to": "', "Boston", ROUTE_PIECES[10]) == {
        "Bo": BIAS, "Boston": BIAS}
    # Neither an origin nor a destination: a guess among the names, at half the bias.
    assert set(changed_by(ROUTE_PIECES, request, (ROUTE_PIECES[2],)).values()) == {BIAS / 2, -BIAS}
    assert route_changes("Hotels in Seattle and Boston", ROUTE_PIECES[0]) == {  # no "from": the guess
        "Bo": BIAS / 2, "Boston": BIAS / 2, "Se": BIAS / 2, "Seattle": BIAS / 2}


def test_a_string_value_does_not_start_as_a_word_of_json_schemas_types_the_request_does_not_write():
    assert raised_by("Set the kind of the thing", '{"s": "') == {
        "string": -2 * BIAS, "integer": -2 * BIAS, "json": -2 * BIAS, **EMPTY}
    assert raised_by("Cut the string in two", '{"s": "') == {
        "integer": -2 * BIAS, "json": -2 * BIAS, **EMPTY}  # "string" is written
    assert raised_by("Export it as JSON", '{"s": "') == {"string": -2 * BIAS, "integer": -2 * BIAS, **EMPTY}
    assert raised_by("Set the kind of the thing", '{"s": "', "Los") == {}  # only a value's first token


def test_a_later_calls_name_goes_on_as_a_function_the_request_asks_for_and_no_call_names_yet():
    asked = ("area_rect", "area_circle")
    assert raised("x", '{"name": "area_rect", "arguments": {}}', ", ", '{"name": "', "area", by=2 * BIAS,
                  functions=asked) == {"_circle"}
    assert raised("x", '{"name": "', "area", by=2 * BIAS, functions=asked) == {"_circle", "_rect"}  # the first: either
    assert raised("x", '{"name": "area_rect", "arguments": {}}', ", ", '{"name": "', "area") == set()  # none asked


ENDS = {",": BIAS, "}": BIAS, ", ": BIAS, " ": BIAS}  # of PIECES, those that end a number


def test_a_number_the_request_writes_ends_where_it_does():
    assert raised_by("the factorial of 5", CALL, "5") == ENDS  # 5, not 5012345678901234
    assert raised_by("at 5 m/s, 20 m/s or 200 m/s", CALL, "20") == {}  # 20 may be whole or go on to 200
    assert raised_by("at 20 m/s for 5 seconds", '{"a": ', "20") == {}  # not a call's arguments


def test_the_separator_is_raised_after_a_whole_value_while_numbers_of_the_request_are_unused():
    separators = {",": BIAS / 2, ", ": BIAS / 2}
    assert raised_by("at 20 m/s for 5 seconds", CALL, "20") == ENDS | {  # 5 is in no call yet
        piece: ENDS[piece] + raise_ for piece, raise_ in separators.items()}
    assert raised_by("at 20 m/s for 5 seconds", CALL, "20", ", ", '"b": ', "5") == ENDS  # all are in


def test_a_value_may_begin_the_requests_next_number_in_reading_order():
    request = "first 5, 20 and 1, then 2, 20 and 5"
    assert raised(request, CALL, by=BIAS / 2) == {"5"}  # before any number value: the request's first
    assert raised(request, CALL, "5", ", ", '"b": ', by=BIAS / 2) == {"2", "20"}  # after 5: 20
    assert raised(request, CALL, "1", ", ", '"b": ', by=BIAS / 2) == {"2"}  # after 1 (its first place): 2
    assert raised(request, CALL, "5", ", ", '"b": ', "20", ", ", '"b": ', "1", "}", "}", ", ", CALL,
                  by=BIAS) == {"2"}  # the next call goes on from there: 2; to the same function, the whole bias
    assert raised(request, CALL, "5", ", ", '"b": ', "20", ", ", '"b": ', "1", "}", "}", ", ",
                  '{"name": "g", "arguments": {"a": ', by=BIAS / 2) == {"2"}  # to another, a guess
    assert raised(request, '{"a": ') == set()  # not a call's arguments
    assert raised("no numbers here", CALL) == set()


def test_a_number_begun_as_the_next_in_reading_order_goes_on_as_that_one():
    assert raised("first 5, then 200, then 205", CALL, "5", ", ", '"b": ', "2", "0", by=2 * BIAS) == {"0"}
    assert raised("first 5, then 205, then 200", CALL, "5", ", ", '"b": ', "2", "0", by=2 * BIAS) == {"5"}
    assert raised("first 5, then 205, then 200", CALL, "2", "0", by=2 * BIAS) == {"0", "5"}  # 5 was next: either
    # Where what is written is a number of the request too, but a later one: the next goes on.
    assert raised("a principle of $2000 over 20 years", CALL, "20", by=2 * BIAS) == {"0", "00"}
    # Where it is the next whole, though another goes on from it: it ends.
    assert raised("over 20 years, a principle of $2000", CALL, "20") == {",", "}", ", ", " "}


def test_a_number_every_call_repeats_does_not_move_the_next_in_reading_order():
    request = "5 and 20 to 2; then 20 and 5; then 1 and 5, to 2"
    first, second = (CALL, "5", ", ", '"b": ', "20", ", ", '"b": ', "2", "}", "}", ", "), (
        CALL, "20", ", ", '"b": ', "5", ", ", '"b": ', "2", "}", "}", ", ")
    assert raised(request, *first, *second, CALL, by=BIAS) == {"1"}  # not past the last "2"


def test_a_value_that_is_a_name_the_request_lists_with_others_is_ended_there():
    closers = {'"', '",', '"}'}
    assert raised("Weather in Los Angeles, San Diego and Manila", '{"s": "', "Los", " Angeles", by=BIAS / 2) == closers
    assert raised("Weather in Los Angeles and San Diego", '{"k": [', '"', "Los", " Angeles", by=BIAS / 2) == closers
    assert raised("Weather in Los Angeles, please", '{"s": "', "Los", " Angeles") == set()  # a name alone


def test_a_string_value_is_not_left_empty():
    assert {piece: change for piece, change in raised_by("Find sushi in Boston", '{"s": "').items()
            if piece.startswith('"')} == EMPTY
    assert raised_by("Find sushi in Boston", '{"s": "', "Los") == {}  # once begun, it may end


EMPTY_PIECES = ['{"name": "f", "arguments": {"s":', ' "', ' ""', ' "",', ' """', '"', '",', ' [', ' []', ' [],', "]",
                "],", "1", ' {"', '"}']


def empty_lowered(*written: str, required: frozenset[str] = frozenset()) -> dict[str, float]:
    return changed_by(EMPTY_PIECES, "Find sushi in Boston", written, arguments=ArgumentKinds(required=required))


def test_a_value_is_not_left_empty_in_one_token_nor_an_array_and_a_required_one_even_less():
    start = '{"name": "f", "arguments": {"s":'
    whole = {' ""': -BIAS, ' "",': -BIAS, ' []': -BIAS, ' [],': -BIAS}  # ' """' is no empty value
    assert empty_lowered(start) == whole
    assert empty_lowered(start, required=frozenset("s")) == {piece: 2 * change for piece, change in whole.items()}
    assert empty_lowered(start, ' [') == {**whole, "]": -BIAS, "],": -BIAS}  # an array's first item
    assert empty_lowered(start, ' [', "1") == {}  # once it holds one, it may end
    assert empty_lowered(start, ' "', required=frozenset("s")) == {'"': -2 * BIAS, '",': -2 * BIAS, '"}': -2 * BIAS}
    assert empty_lowered(start, ' {"') == {}  # a key, not a value


def test_a_string_value_that_stands_before_a_joining_word_of_the_request_is_ended_there():
    closers = {'"', '",', '"}'}
    assert raised("Flights from Los Angeles to Manila", '{"s": "', "Los", " Angeles") == closers
    assert not raised_by("Flights from Los Angeles to Manila", '{"s": "', "Los").keys() & closers  # not before one
    # A quotation: not ended there, but gone on with as the quoted name does.
    assert raised_by("Play 'Los Angeles to Manila' again", '{"s": "', "Los", " Angeles") == {" ": 2 * BIAS}
    # An argument whose schema prescribes a format ends as the format does.
    call = '{"name": "f", "arguments": {"s": "'
    assert raised("Flights from Los Angeles to Manila", call, "Los", " Angeles") == {'"', '",', '"}'}
    assert raised_by("Flights from Los Angeles to Manila", call, "Los", " Angeles", formatted=frozenset("s")) == {}
    assert raised("Flights from Los Angeles?", '{"s": "', "Los", " Angeles") == {'"', '",', '"}'}  # a sentence's end
    assert raised("Shares of Apple Inc. rose", '{"s": "', "Apple", " Inc") == set()  # an abbreviation's full stop
    functions = [ChoosableFunction("f", "", "", parameters={"properties": {
        "a": {"type": "string", "description": "The city, e.g. San Francisco, CA."},
        "b": {"type": "string", "description": "Date in the format YYYY-MM-DD."},
        "c": {"type": "string", "description": "The city, such as Paris."}, "d": {"type": "string"}}})]
    assert formatted_arguments(functions) == {"a", "b"}


def test_a_number_with_a_word_of_scale_goes_on_to_its_whole_value():
    assert raised("a payout of 20 million USD", CALL, "20", by=2 * BIAS) == {"0", "00"}


def test_a_later_call_goes_through_the_names_the_request_lists_where_the_call_before_gave_the_argument_one():
    request = "Compare Magnus Carlsen with Manila Chess Club"
    first = ('{"name": "f", "arguments": {"s": "', "Magnus Carlsen", '"}', "}", ", ")
    assert raised(request, *first, '{"name": "f", "arguments": {"s": "') == {"Man"}  # the whole bias
    # Another argument: any name this call does not hold yet, as in a first call.
    assert raised(request, *first, '{"name": "f", "arguments": {"t": "', by=BIAS / 2) == {
        "Mag", "Magnus", "Magnus Carlsen", "Man"}


@pytest.mark.parametrize(("numbers", "loops"), [
    (("0.6", "0.8", "0.6", "0.8"), True),  # a run of two, twice in a row
    (("0.3", "0.6", "0.8", "0.3", "0.6", "0.8"), True),
    (("0.3", "0.6", "0.3"), False),  # a number again, as [0.3, 0.4, 0.3] of an answer
    (("0.6", "0.6"), False),  # one number twice, as [16, 16] of an answer
    (("0.6", "0.8", "0.6", "0.3"), False),
])
def test_an_array_of_numbers_ends_once_a_run_of_them_is_written_twice_in_a_row(numbers, loops):
    pieces = ['{"name": "f", "arguments": {"k": [', "0.3", "0.6", "0.8", ", ", "]", "]}"]
    written = ['{"name": "f", "arguments": {"k": [']
    for number in numbers:
        written += [number, ", "]
    changed = changed_by(pieces, "no numbers here", tuple(written[:-1]))
    assert changed == ({"]": 2 * BIAS, "]}": 2 * BIAS, ", ": -2 * BIAS} if loops else {})


def test_a_later_calls_name_once_begun_goes_on_as_a_name_no_call_holds_yet():
    request = "Train the classifier on two datasets, 'dataset1' and 'dataset2'."
    first = ('{"name": "f", "arguments": {"s": "', "dataset1", '"}', "}", ", ")
    assert raised(request, *first, '{"name": "f", "arguments": {"s": "', "dataset") == {"2"}  # not "1" again
    assert raised(request, '{"name": "f", "arguments": {"s": "', "dataset") == {"1", "2"}  # a first call: either


def test_a_later_call_goes_on_to_the_next_item_of_a_list_the_request_writes_after_the_value_the_call_before_gave():
    request = "the resistance of a wire with a resistivity of copper and aluminum"
    first = ('{"name": "f", "arguments": {"s": "', "copper", '"}', "}", ", ")
    second = '{"name": "f", "arguments": {"s": "'
    assert raised(request, *first, second, by=2 * BIAS) == {"alu", "aluminum"}  # from its first token, twice
    assert raised(request, *first, second, "alu") == {"minum"}  # then on as the item goes on
    assert raised(request, *first, second, "aluminum") == {'"', '",', '"}'}  # and ended there, whole
    # Another argument, or a call that holds the item already: nothing of the list.
    assert raised(request, *first, '{"name": "f", "arguments": {"t": "') == set()
    assert raised(request, *first, second, "aluminum", '"}', "}", ", ", second) == set()


def test_a_value_begun_with_a_names_first_letter_goes_on_as_the_name_does_with_three_times_the_bias():
    request = "What's the classical rating of Zubin Mehta?"
    assert raised(request, '{"s": "', "Z", by=3 * BIAS) == {"ub", "ubin"}  # not "ach" (Zachary, a model's guess)
    assert raised("What's the classical rating of zubin mehta?", '{"s": "', "Z") == set()  # no name
    assert raised("What's the classical rating of Xubin Mehta?", '{"s": "', "Z") == set()  # none begins so


def test_a_percentage_is_guessed_as_its_fraction_except_where_the_argument_takes_a_percentage():
    assert raised("a rate of 5% for 10 years", CALL) == {"0"}  # 0.05 (from its first digit), with the whole bias
    assert raised("a rate of 5 percent for 10 years", CALL, "0", ".", "0", "5", ", ", '"b": ', by=BIAS / 2) == {"1"}
    assert raised("a rate of 5% for 10 years", CALL, by=BIAS / 2, whole=frozenset({"a"})) == {"5"}
    rate = {"type": "number"}
    functions = [ChoosableFunction("f", "", "", parameters={"properties": {
        "a": {**rate, "description": "The annual rate, in percent."},
        "b": {**rate, "description": "Rate in % as a decimal"},
        "growth_percentage": rate, "c": rate}})]
    assert whole_percentages(functions) == {"a", "growth_percentage"}


def test_numbers_a_string_value_writes_in_reading_order_are_passed():
    request = "the derivative of 2x - 1 at 5, then of 5x at 20"
    assert raised(request, '{"name": "f", "arguments": {"s": "', "2", "x", " -", " ", "1", '",', '"b": ',
                  by=BIAS / 2) == {"5"}


DATE_PIECES = ['{"name": "f", "arguments": {"check_in": "', ', "check_out": "', ', "city": "', "2023", "20", "2", "-",
               "04", "-04", "-08", "Apr", "il", '"', '",', '"}']
DATE_CALL = '{"name": "f", "arguments": {"check_in": "'


def date_raised(request: str, *written: str) -> dict[str, float]:
    """What the grounding changes after ``written``, where check_in and check_out take ISO dates."""
    iso = {"check_in": "%Y-%m-%d", "check_out": "%Y-%m-%d"}
    return changed_by(DATE_PIECES, request, written, arguments=ArgumentKinds(date_formats=iso))


def test_a_date_argument_is_written_as_the_request_dates_in_its_format():
    request = "Is a Hilton in Paris free from 2023 April 4th to April 8th?"
    closing = {'"': BIAS, '",': BIAS, '"}': BIAS}
    assert date_raised(request, DATE_CALL) == {"2023": BIAS, "20": BIAS, "2": BIAS, '"': -BIAS, '",': -BIAS,
                                                '"}': -BIAS}
    assert date_raised(request, DATE_CALL, "2023", "-") == {"04": 2 * BIAS}  # both dates go on so; its year written
    assert date_raised(request, DATE_CALL, "2023", "-", "04", "-04") == closing  # whole
    # The second date argument: the date no call holds yet.
    second = (DATE_CALL, "2023", "-", "04", "-04", '"', ', "check_out": "', "2023", "-", "04")
    # Its own date raised, the first's lowered: a value the call holds already (the "-" both begin with, both).
    assert date_raised(request, *second) == {"-08": 2 * BIAS, "-": 2 * BIAS - BIAS, "-04": -BIAS}
    assert date_raised(request, *second, "-08") == closing


def test_a_date_begun_otherwise_or_an_argument_that_takes_none_is_held_as_any_string():
    request = "Is a Hilton in Paris free from 2023 April 4th to April 8th?"
    assert date_raised(request, DATE_CALL, "Apr") == {"il": 2 * BIAS}  # the request's own words, as any string's
    assert date_raised("Is a Hilton in Paris free next week?", DATE_CALL) == {'"': -BIAS, '",': -BIAS, '"}': -BIAS}
    city = ('{"name": "f", "arguments": {"check_in": "', "2023", "-", "04", "-04", '"', ', "city": "')
    assert date_raised(request, *city)["2023"] == -BIAS  # not raised as a date: lowered, as check_in's value


BOOLEAN_PIECES = ['{"name": "f", "arguments": {"include_description": ', '{"name": "f", "arguments": {"detailed": ',
                  " true", " false", "true", " t", " "]


@pytest.mark.parametrize(("written", "asked"), [
    ('{"name": "f", "arguments": {"include_description": ', True),  # the request names it
    ('{"name": "f", "arguments": {"detailed": ', False),  # it does not
])
def test_a_boolean_the_request_asks_for_is_raised_to_true(written, asked):
    arguments = ArgumentKinds(booleans=frozenset({"include_description", "detailed"}))
    changed = changed_by(BOOLEAN_PIECES, "List the proteins, with a description of each.", (written,),
                         arguments=arguments)
    assert changed == ({" true": BIAS, "true": BIAS, " t": BIAS, " ": BIAS} if asked else {})


def test_the_arguments_kinds_name_the_boolean_arguments():
    function = ChoosableFunction("f", "", "", "", {"type": "object", "properties": {
        "detailed": {"type": "boolean"}, "flag": {"type": ["boolean", "null"]}, "name": {"type": "string"}}})
    assert ArgumentKinds.of([function]).booleans == {"detailed", "flag"}


KEY_PIECES = ['{"name": "f", "arguments": {"s": "', '{"name": "g", "arguments": {"s": "', "x", '"', '", "t": 1}}',
              '"}}', ", ", ",", "}"]


@pytest.mark.parametrize(("first_call", "second_call", "raised"), [
    ('{"name": "f", "arguments": {"s": "', '{"name": "f", "arguments": {"s": "', True),  # t is yet to come
    ('{"name": "f", "arguments": {"s": "', '{"name": "g", "arguments": {"s": "', False),  # another function's
])
def test_a_later_call_to_the_same_function_goes_on_to_the_arguments_the_last_one_gave(first_call, second_call, raised):
    written = (first_call, "x", '", "t": 1}}', ", ", second_call, "x", '"')
    changed = changed_by(KEY_PIECES, "Find it", written)
    assert changed == ({", ": BIAS, ",": BIAS, "}": -BIAS} if raised else {})  # going on, not closing
    gave_none = (first_call, "x", '"}}', ", ", second_call, "x", '"')
    assert changed_by(KEY_PIECES, "Find it", gave_none) == {}


WORDS_PIECES = ['{"name": "f", "arguments": {"initial": ', '{"name": "f", "arguments": {"period_in_years": ', "5", "50",
                "500", "7", "3", "}}", ", "]
INVESTMENTS = "John invested $5000 in a fund 5 years ago; now $7000. Then $8000 in another 3 years ago; now $12000."


def test_a_number_is_guessed_beside_the_arguments_own_words_before_reading_order():
    period = '{"name": "f", "arguments": {"period_in_years": '
    assert changed_by(WORDS_PIECES, INVESTMENTS, ('{"name": "f", "arguments": {"initial": ',)) == {
        "5": BIAS / 2, "50": BIAS / 2, "500": BIAS / 2}  # reading order: 5000 first
    assert changed_by(WORDS_PIECES, INVESTMENTS, (period,)) == {"5": BIAS}  # "5 years", not 5000
    # a later call's: the number beside its words that no call gave it yet
    assert changed_by(WORDS_PIECES, INVESTMENTS, (period, "5", "}}", ", ", period)) == {"3": BIAS}


def test_a_number_guessed_beside_the_arguments_words_starts_with_the_whole_bias():
    rooms = ["{\"name\": \"f\", \"arguments\": {\"rooms\": ", "{\"name\": \"f\", \"arguments\": {\"area\": ", "3", "2"]
    request = "A house of 3 rooms and 2 floors"
    assert changed_by(rooms, request, (rooms[0],)) == {"3": BIAS}  # "3 rooms": beside its words
    assert changed_by(rooms, request, (rooms[1],)) == {"3": BIAS / 2}  # reading order alone


def test_a_number_inside_an_objects_value_is_guessed_beside_its_own_keys_words():
    pieces = ['{"name": "f", "arguments": {"area": {"width": ', '{"name": "f", "arguments": {"area": ', "2", "20",
              "15", "1"]
    request = "Paint a wall of width 20ft and height 12ft; leave out the window area of 15 sq.ft."
    assert changed_by(pieces, request, (pieces[0],)) == {"2": BIAS, "20": BIAS}  # "width 20": not "area of 15"
    assert changed_by(pieces, request, (pieces[1],)) == {"1": BIAS, "15": BIAS}  # the argument's own: "area of 15"


WORDED_PIECES = ['{"name": "f", "arguments": {"no_of_adults": ', '{"name": "f", "arguments": {"rooms": ', "2", "0",
                 "20", "1", "}}", ", "]
HOTEL = "Is a Hilton in Paris free for two adults from 2023-04-04 to 2023-04-08 at $2100?"


def test_a_number_written_as_a_word_beside_the_arguments_words_is_guessed_and_ended_there():
    adults, rooms = WORDED_PIECES[:2]
    assert changed_by(WORDED_PIECES, HOTEL, (adults,)) == {"2": BIAS / 2}  # "two adults"; not 2100's "2", "21"
    enders = {"}}": BIAS, ", ": BIAS}
    assert changed_by(WORDED_PIECES, HOTEL, (adults, "2")) == enders  # 2, not the 2100 that goes on from it
    assert changed_by(WORDED_PIECES, HOTEL, (rooms,)) == {"2": BIAS / 2}  # no word of "rooms": reading order
    # A number in digits beside the argument's words is the guess, the word is not.
    assert changed_by(WORDED_PIECES, "two adults: 1 adult and 1 child at $2100", (adults,)) == {"1": BIAS}


ASKED_PIECES = ['{"name": "f", "arguments": {"a": "x"', '{"name": "g", "arguments": {"a": "x"', ", ", "}", '"', "mode",
                "m", "b"]


@pytest.mark.parametrize(("call", "asked"), [
    ('{"name": "f", "arguments": {"a": "x"', True),  # f's mode comes after a
    ('{"name": "g", "arguments": {"a": "x"', False),  # g has no mode
])
def test_an_argument_the_request_asks_for_is_gone_on_to_and_named(call, asked):
    arguments = ArgumentKinds(enums={"mode": ("transit", "driving")}, orders={"f": ("a", "b", "mode"), "g": ("a", "b")})
    request = "Directions to Rome by transit"
    going_on = {", ": BIAS, "}": -BIAS}  # and not closing the arguments
    assert changed_by(ASKED_PIECES, request, (call,), arguments=arguments) == (going_on if asked else {})
    key = changed_by(ASKED_PIECES, request, (call, ", ", '"'), arguments=arguments)
    assert key == ({"m": BIAS, "mode": BIAS} if asked else {})


LIST_PIECES = ['{"name": "f", "arguments": {"a": [', "3", ", ", "-2", "1", "]", "],", "]}", "4"]


@pytest.mark.parametrize(("items", "raised"), [
    (("3",), {", "}),  # some of "3, -2 and 1": another item
    (("3", ", ", "-2", ", ", "1"), {"]", "],", "]}"}),  # all of it: the array ends
    (("4",), {", ", "]", "],", "]}"}),  # of no list: the number ends, but how is left to the model
])
def test_an_array_of_numbers_goes_through_a_list_the_request_writes_and_ends_with_it(items, raised):
    changed = changed_by(LIST_PIECES, "coefficients 3, -2 and 1, then 4", ('{"name": "f", "arguments": {"a": [', *items))
    assert {piece for piece, change in changed.items() if change == max(changed.values())} == raised


ENUM_PIECES = ['{"name": "f", "arguments": {"amenities": ["', "P", "Patio", "W", "Wi", '"', '"]']


def test_an_enums_value_the_request_writes_is_proposed_whole():
    arguments = ArgumentKinds(enums={"amenities": ("Patio", "Wi-Fi")})
    opened = '{"name": "f", "arguments": {"amenities": ["'
    assert changed_by(ENUM_PIECES, "Sushi with a patio", (opened,), arguments=arguments) == {
        "P": BIAS, "Patio": BIAS, '"': -BIAS, '"]': -BIAS}  # (and not empty)
    assert changed_by(ENUM_PIECES, "Sushi with a patio", (opened, "Patio"), arguments=arguments) == {
        '"': BIAS, '"]': BIAS}  # whole: it ends


def test_an_array_of_an_enums_values_takes_them_in_the_order_the_request_writes_them():
    arguments = ArgumentKinds(enums={"amenities": ("Patio", "Wi-Fi")})
    opened = '{"name": "f", "arguments": {"amenities": ["'
    assert changed_by(ENUM_PIECES, "Sushi with wi-fi and a patio", (opened,), arguments=arguments) == {
        "W": BIAS, "Wi": BIAS, '"': -BIAS, '"]': -BIAS}  # Wi-Fi first, not Patio: its list's order
    assert changed_by(ENUM_PIECES, "Sushi with a patio and wi-fi", (opened,), arguments=arguments) == {
        "P": BIAS, "Patio": BIAS, '"': -BIAS, '"]': -BIAS}


@pytest.mark.parametrize(("items", "changes"), [
    (('"Patio"',), {"]": BIAS, ", ": -BIAS}),  # all the request asks for: the array ends, going on is lowered
    (('"Wi"',), {", ": BIAS}),  # not what it asks for: another item
])
def test_an_array_of_an_enums_values_ends_once_it_holds_those_the_request_writes(items, changes):
    pieces = ['{"name": "f", "arguments": {"amenities": [', '"Patio"', '"Wi"', ", ", "]"]
    arguments = ArgumentKinds(enums={"amenities": ("Patio", "Wi-Fi")})
    changed = changed_by(pieces, "Sushi with a patio", ('{"name": "f", "arguments": {"amenities": [', *items),
                         arguments=arguments)
    assert changed == changes


def test_an_enums_value_closed_with_what_follows_in_one_token_ends_the_array_once_it_holds_what_is_asked():
    pieces = ['{"name": "f", "arguments": {"amenities": ["', "Patio", "Wi", '"', '",', '"]', '"],']
    arguments = ArgumentKinds(enums={"amenities": ("Patio", "Wi-Fi")})
    opened = '{"name": "f", "arguments": {"amenities": ["'
    assert changed_by(pieces, "Sushi with a patio", (opened, "Patio"), arguments=arguments) == {
        '"': BIAS, '"]': BIAS, '"],': BIAS, '",': -BIAS}  # all it asks for: '",' lowered
    assert changed_by(pieces, "Sushi with a patio and wi-fi", (opened, "Patio"), arguments=arguments) == {
        '"': BIAS, '",': BIAS}  # Wi-Fi is yet to come


REPEAT_PIECES = ['{"name": "chess_rating", "arguments": {"player_name": "', '", "variant": "', "Man", "chester",
                 " United", "Magn", "us", "M", "chess", "_rating", '"', '",', '"}', "x", "Top", "_Chess", "_"]


def repeat_changes(request: str, *written: str) -> dict[str, float]:
    return changed_by(REPEAT_PIECES, request, written)


def test_an_arrays_item_does_not_go_on_as_another_arguments_value():
    pieces = ['{"name": "f", "arguments": {"location": "New York", "areas": ["', "New", "Crim", '"', '",', '"]']
    # Lowered by the bias, less the half bias of "New York" as the request's one name.
    assert changed_by(pieces, "Lawyers in New York for criminal law", pieces[:1])["New"] == -BIAS / 2


def test_a_string_value_does_not_go_on_as_one_the_call_already_holds():
    start = '{"name": "chess_rating", "arguments": {"player_name": "'
    held = (start, "Man", "chester", " United", '", "variant": "')
    request = "What's the classical rating of Manchester United's chess club?"
    # Lowered: the value held, the function's name; the request's one name is still its half-bias guess, and
    # the empty value is lowered as ever.
    assert repeat_changes(request, *held) == {"Man": -BIAS / 2, "M": -BIAS / 2, "chess": -BIAS, **EMPTY}
    assert repeat_changes(request, *held, "chess") == {"_rating": -BIAS, "_": -BIAS}
    assert repeat_changes(request, *held, "Man", "chester", " United") == {'"': -BIAS, '",': -BIAS, '"}': -BIAS}
    assert repeat_changes(request, *held, "x") == {}  # begun otherwise
    # The request writes it twice: two arguments may hold it.
    assert repeat_changes("Manchester United against Manchester United", *held) == {
        "chess": -BIAS, "M": BIAS / 2, "Man": BIAS / 2, **EMPTY}
    # The first value: nothing is held yet but the function's name.
    assert repeat_changes(request, start, "Man") == {"chester": 2 * BIAS}  # as the request goes on
    assert repeat_changes(request, start, "chess") == {"_rating": -BIAS, "_": -BIAS}
    assert repeat_changes(request, start, "Top", "_Chess") == {"_rating": -BIAS, "_": -BIAS}  # from a word on
    assert repeat_changes(request, start, "Top", "_") == {}  # no word begun yet


LOOP_PIECES = ['{"name": "f", "arguments": {"k": [', '"', "Italian", "italian", "o", '",', '"]', '", ', "]", ",", ", ",
               "]}"]


def test_an_array_of_strings_ends_at_its_first_item_that_repeats_an_earlier_one():
    start = ('{"name": "f", "arguments": {"k": [', '"', "Italian", '",', '"', "Italian", "o", '",', '"')
    assert changed_by(LOOP_PIECES, "Find Italian food", (*start, "Italian", "o")) == {
        '"]': 2 * BIAS, '"': 2 * BIAS, '",': -2 * BIAS, '", ': -2 * BIAS}  # "Italiano" again: ended
    assert changed_by(LOOP_PIECES, "Find Italian food", (*start, "o")) == {}  # a new item so far
    assert changed_by(LOOP_PIECES, "Find Italian food", (*start, "italian"))['"]'] == 2 * BIAS  # case aside
    # Its closing quote alone written: the array's end next.
    assert changed_by(LOOP_PIECES, "Find Italian food", (*start, "Italian", "o", '"')) == {
        "]": 2 * BIAS, "]}": 2 * BIAS, ",": -2 * BIAS, ", ": -2 * BIAS}
    assert changed_by(LOOP_PIECES, "Find Italian food", start[:4]) == {}  # one item: nothing repeats


def test_a_value_begun_as_the_first_words_of_a_long_name_goes_on_as_it_does_with_twice_the_bias():
    pieces = ['{"name": "f", "arguments": {"team": "', "Manchester", " United", " City", "'s", '"']
    start = pieces[0]
    request = "What are the next five matches for Manchester United?"
    assert changed_by(pieces, request, (start, "Manchester")) == {" United": 2 * BIAS}
    assert changed_by(pieces, "Find Albert Einstein's theories", (
        '{"name": "f", "arguments": {"team": "', "Manchester")) == {}  # no such name
    assert changed_by(pieces, "Fans of Manchester City", (start, "Manchester")) == {" City": 2 * BIAS}
    assert changed_by(pieces, "Fans of Manchester citywide", (start, "Manchester")) == {}  # no name goes on
    coded = ['{"name": "f", "arguments": {"city": "', "Los", " Angeles", ",", ", CA", '"']
    assert changed_by(coded, "Jazz events in Los Angeles, CA for the next 14 days", (coded[0], "Los", " Angeles")) == {
        ",": 2 * BIAS, ", CA": 2 * BIAS}  # the state's code, as the request writes it


@pytest.mark.parametrize(("written", "changes"), [
    ((CALL, "[", '"', "Z", '",', '"', "ub"), {}),  # part of the list: left to the model
    ((CALL, "[", '"', "Z", '",', '"', "ub", '",', '"', "x"), {'"]': BIAS, '",': -BIAS}),  # all of it, as "x" closes
    ((CALL, "[", '"', "Z", '",', '"', "ub", '",', '"', "x", '"'), {"]": BIAS, ",": -BIAS}),  # or once it has
])
def test_an_array_of_strings_ends_once_it_holds_all_the_names_of_a_list_the_request_writes(written, changes):
    pieces = [*PIECES, '"]', "]", "["]
    changed = changed_by(pieces, "A progression of Z, Ub and X, for 4 measures", written)
    assert {piece: change for piece, change in changed.items() if piece in ('"]', '",', "]", ",")} == changes


def test_the_names_of_a_list_are_read_from_a_run_of_them_single_letters_too():
    from llmproxy.backends._list_continuation import name_lists, written_names
    text = "Chords C, F and G at 0°C. Weather in Seattle, Boston and Chicago, then in New York and Paris"
    assert name_lists(text, written_names(text)) == [
        frozenset({"c", "f", "g"}), frozenset({"seattle", "boston", "chicago"}), frozenset({"new york", "paris"})]
    text = "Sculptures in Rome, Italy, and museums in Paris, Lyon"  # two with a comma alone: a place, its country
    assert name_lists(text, written_names(text)) == []
    text = "Parks with a Tennis Court and a Picnic Area"  # an article before a name of the list
    assert name_lists(text, written_names(text)) == [frozenset({"tennis court", "picnic area"})]


def test_a_names_rest_is_raised_along_the_pieces_the_tokenizer_writes_it_in():
    pieces = ['{"name": "f", "arguments": {"location": "', "G", "a", "al", "ala", "apagos", "pagos", '"']
    request = "How many turtles live on the Galapagos?"
    start = (pieces[0], "G")

    def split(text: str) -> list[str]:  # as SmolLM2's tokenizer writes the name: "Gal" "apagos"
        return ["Gal", "apagos"] if text == "Galapagos" else [text]

    def grounding_raises(split_text=None) -> set[str]:
        tokens = GroundingTokens.of(pieces)
        grounding = ValueGrounding(tokens, pieces, request, BIAS, split=split_text)
        for piece in start:
            grounding.accept(tokens.token_of[piece])
        logits = np.zeros(len(pieces), dtype=np.float32)
        grounding.adjust(logits)
        return {pieces[token] for token in np.flatnonzero(logits > 0)}

    assert grounding_raises(split) == {"al"}  # "Gal" ends where the tokenizer ends a piece; "Ga", "Gala" do not
    assert grounding_raises() == {"a", "al", "ala"}  # the tokenizer unknown: every piece that goes on
    assert grounding_raises(lambda text: [text]) == {"a", "al", "ala"}  # none of them ends one: all of them


def test_a_quoted_value_ends_with_its_quotation():
    pieces = ['{"name": "f", "arguments": {"maker": "', "Strad", "ivarius", "'", "'s", '"']
    request = "Find the musical instrument 'Violin' from 'Stradivarius' maker."
    assert changed_by(pieces, request, (pieces[0], "Strad", "ivarius")) == {}  # not on into "' maker"
    # Inside the quotation, the value still goes on as the request does.
    assert changed_by(pieces, request, (pieces[0], "Strad")) == {"ivarius": 2 * BIAS}
    # An apostrophe that is no quotation's end: a possessive, as the request writes it, with the bias.
    assert changed_by(pieces, "Stradivarius's violins", (pieces[0], "Strad", "ivarius")) == {"'s": BIAS, "'": BIAS}


def test_a_string_arguments_choices_quoted_in_its_description_are_its_enum():
    function = ChoosableFunction("integrate", "", "", "", {"type": "object", "properties": {
        "method": {"type": "string", "description": "Choices are 'trapezoid' or 'simpson'. Default is 'trapezoid'."},
        "function": {"type": "string", "description": "The function, for example 'x^3'."},  # one: an example
        "owner": {"type": "string", "description": "The user's name and the city's"},  # apostrophes
        "mode": {"type": "string", "enum": ["fast", "exact"], "description": "'a' or 'b'"}}})  # its own enum
    assert ArgumentKinds.of([function]).enums == {"method": ("trapezoid", "simpson"), "mode": ("fast", "exact")}
    assert described_choices('Either "metric" or "imperial".') == ("metric", "imperial")
    pieces = ['{"name": "integrate", "arguments": {"method": "', "s", "simpson", "tra", '"']
    assert changed_by(pieces, "Integrate it using simpson method", pieces[:1],
                      arguments=ArgumentKinds.of([function])) == {"s": 2 * BIAS, "simpson": 2 * BIAS, '"': -BIAS}


@pytest.mark.parametrize(("description", "examples"), [
    ("The type of flight e.g., one-way, round-trip", ("one-way", "round-trip")),
    ("Type of the scale, either major or minor. Default is 'major'.", ("major", "minor")),
    ("The property of the rectangle. It can be length, width or diagonal.", ("length", "width", "diagonal")),
    ("The type of the exclusion e.g window, door etc.", ("window", "door")),
    ("The key of the piece, e.g., C Major.", ()),  # one: no choice
    ("The mode of transportation (walk, bike, transit, drive).", ("walk", "bike", "transit", "drive")),
    ("The genre (e.g. Drama, Comedy, etc)", ("Drama", "Comedy")),
    ("The competition (for example, UEFA Champions League)", ()),
    ("The report (which holds the totals, the averages and the counts, by year)", ()),  # a sentence
    ("The city and state, e.g. New York, NY", ()),  # a format's parts
    ("The date, in the format e.g. 2023-01-01 or 01/01/2023", ()),  # a format
])
def test_a_description_names_examples_without_quotes(description, examples):
    assert described_examples(description) == examples


def test_a_string_arguments_examples_are_chosen_from_where_the_request_writes_one():
    function = ChoosableFunction("flight", "", "", "", {"type": "object", "properties": {
        "type": {"type": "string", "description": "The type of flight e.g., one-way, round-trip"},
        "method": {"type": "string", "description": "Choices are 'trapezoid' or 'simpson', e.g. simpson"}}})
    kinds = ArgumentKinds.of([function])
    assert kinds.examples == {"type": ("one-way", "round-trip")} and kinds.enums == {"method": ("trapezoid", "simpson")}
    assert kinds.choices() == {"type": ("one-way", "round-trip"), "method": ("trapezoid", "simpson")}
    pieces = ['{"name": "flight", "arguments": {"type": "', "round", "-trip", "restaurant", '"']
    request = "Then find the cheapest flight for round-trip from New York to Los Angeles"
    assert changed_by(pieces, request, pieces[:1], arguments=kinds) == {"round": 2 * BIAS, '"': -BIAS}  # sure
    assert changed_by(pieces, request, pieces[:2], arguments=kinds)["-trip"] == BIAS


def test_a_choice_none_of_whose_values_the_request_writes_takes_its_functions_default():
    trends = {"type": "object", "properties": {"room": {"type": "string"}, "period": {
        "type": "string", "enum": ["Daily", "Monthly"], "description": "The period. Default 'Daily'"}}}
    prices = {"type": "object", "properties": {"period": {
        "type": "string", "enum": ["Daily", "Monthly"], "default": "Monthly"}}}
    kinds = ArgumentKinds.of([ChoosableFunction("trends", "", "", "", trends),
                              ChoosableFunction("prices", "", "", "", prices)])
    assert kinds.defaults == {("trends", "period"): "Daily", ("prices", "period"): "Monthly"}  # each its own
    pieces = ['{"name": "trends", "arguments": {"room": "living room", "period": "', "Da", "ily", "Month", "string",
              '"', '{"name": "prices", "arguments": {"period": "']
    request = "Which paint color is most popular for living rooms?"
    assert changed_by(pieces, request, pieces[:1], arguments=kinds) == {"Da": BIAS, "string": -2 * BIAS, '"': -BIAS}
    assert changed_by(pieces, request, pieces[:2], arguments=kinds) == {"ily": BIAS}
    assert changed_by(pieces, request, pieces[:3], arguments=kinds) == {'"': BIAS}  # whole: it ends
    assert changed_by(pieces, request, pieces[-1:], arguments=kinds)["Month"] == BIAS
    # A value of it the request writes is chosen instead, and the schema's words are no start of it either.
    assert changed_by(pieces, "the trend of each month, monthly", pieces[:1], arguments=kinds) == {
        "Month": 2 * BIAS, "string": -2 * BIAS, '"': -BIAS}


def test_a_negative_number_guessed_starts_with_its_sign_at_twice_the_bias():
    pieces = ['{"name": "f", "arguments": {"start": ', '{"name": "f", "arguments": {"start":', "-", " -", " ", "2"]
    request = "the area from x = -2 to x = 3"
    assert changed_by(pieces, request, pieces[:1]) == {"-": 2 * BIAS}  # the space written: its sign
    assert changed_by(pieces, request, pieces[1:2]) == {"-": 2 * BIAS, " -": 2 * BIAS}  # " -": space and sign
    assert changed_by(pieces, "the area from x = 2 to x = 3", pieces[:1]) == {"2": BIAS / 2}  # a guess as ever


def test_a_later_call_goes_on_through_a_list_of_names_in_the_argument_that_had_one_and_stays_in_the_others():
    pieces = ['{"name": "f", "arguments": {"location": "', "Paris", '", "food": "', "Italian", '"}}', ", ",
              '{"name": "f", "arguments": {"location": "', "Chinese"]
    request = "Tell me about the best Italian and Chinese restaurants in the area of Paris."
    first = pieces[:6]
    location = changed_by(pieces, request, (*first, pieces[6]))
    assert location["Paris"] == BIAS and "Chinese" not in location  # Chinese goes with Italian, not with Paris
    assert changed_by(pieces, request, (*first, pieces[6], "Paris", pieces[2]))["Chinese"] == BIAS


OPTIONAL = {"type": "object", "properties": {
    "amount": {"type": "integer"}, "rate": {"type": "number"}, "compound_freq": {"type": "integer"},
    "frequency": {"type": "string", "enum": ["monthly", "yearly"]}}, "required": ["amount", "rate"]}


@pytest.mark.parametrize(("request_text", "closes"), [
    ("Interest on 1500 at a rate of 2.5%", True),  # every number is in the call: none for compound_freq
    ("Interest on 1500 at a rate of 2.5%, compounded 4 times", False),  # a number is left, and asked for
    ("Interest on 1500 at a rate of 2.5%, paid yearly", False),  # the enum's value is written
])
def test_optional_arguments_the_request_holds_no_value_for_are_left_out(request_text, closes):
    pieces = ['{"name": "f", "arguments": {"amount": 1500, "rate": 2.5', "}", ", "]
    arguments = ArgumentKinds.of([ChoosableFunction("f", "", "", "", OPTIONAL)])
    changed = changed_by(pieces, request_text, pieces[:1], arguments=arguments)
    # (the number, whole, raises its end: either)
    assert (changed.get("}", 0.0) - changed.get(", ", 0.0) == 2 * BIAS) == closes


def test_a_later_call_takes_the_first_enum_value_the_request_writes_that_no_call_holds_yet():
    pieces = ['{"name": "f", "arguments": {"metal": "', "copper", '"}}', ", ", "aluminum", "a", "c"]
    arguments = ArgumentKinds(enums={"metal": ("copper", "aluminum", "iron")})
    request = "The resistance of a wire of copper and aluminum"
    empty = {'"}}': -BIAS}  # (an empty value is lowered)
    assert changed_by(pieces, request, pieces[:1], arguments=arguments) == {
        "copper": 2 * BIAS, "c": 2 * BIAS, **empty}  # the first the request writes, begun at twice the bias
    assert changed_by(pieces, request, (*pieces[:4], pieces[0]), arguments=arguments) == {
        "aluminum": 2 * BIAS, "a": 2 * BIAS, "copper": -2 * BIAS, "c": -2 * BIAS, **empty}  # (a copy of the call before)


def test_past_the_requests_last_number_the_guess_is_the_first_no_value_holds_yet():
    pieces = ['{"name": "f", "arguments": {"year": ', "2020", "}}", ", ", "2", "20", "201", "2015"]
    request = "Turtles of the Galapagos Islands in 2015, then the same for the year 2020"
    first = (pieces[0], "2020", "}}", ", ")  # the year's words stand beside 2020: the first call took it
    year = ArgumentKinds(numbers=frozenset({"year"}))
    assert changed_by(pieces, request, (*first, pieces[0]), arguments=year) == {
        "2": BIAS, "20": BIAS, "201": BIAS, "2015": BIAS, "2020": -2 * BIAS}  # (2020 again: a copy, lowered)
    # A number a string value holds is held: "World War 2" leaves no number to guess.
    pieces = ['{"name": "f", "arguments": {"event": "World War 2", "number": ', "2", "1"]
    assert changed_by(pieces, "The important figures of World War 2", pieces[:1],
                      arguments=ArgumentKinds(numbers=frozenset({"number"}))) == {}


def test_an_array_of_numbers_goes_on_through_a_list_that_writes_a_number_twice():
    start = '{"name": "f", "arguments": {"a": ['
    request = "the histogram of 3, -2, 3 and 1"
    changed = changed_by(LIST_PIECES, request, (start, "3", ", ", "-2", ", ", "1"))
    assert changed[", "] > changed["]"]  # 3 is written once of twice: the list goes on
    changed = changed_by(LIST_PIECES, request, (start, "3", ", ", "-2", ", ", "3", ", ", "1"))
    assert changed["]"] == max(changed.values())  # all of it: the array ends


def test_a_string_value_does_not_go_on_as_its_arguments_own_name_where_the_request_does_not_write_it():
    pieces = ['{"name": "get_stock_info", "arguments": {"detail_level": "', "detail", "_level", "ed", '"']
    assert changed_by(pieces, "Give me detail information about Apple", pieces[:2]) == {"_level": -BIAS}
    assert changed_by(pieces, "Set the detail level to high", pieces[:2]) == {}  # the request writes it
    pieces = ['{"name": "get_stock_info", "arguments": {"detail_level": "', "detailed", "_detail", "_", "detail",
              "_level", "de"]
    request = "Give me detail information about Apple"
    assert changed_by(pieces, request, pieces[:2]) == {"_detail": -BIAS}
    # Begun as a word of its own after the value's, it goes on as the name no more: "detailed_" + "detail".
    assert changed_by(pieces, request, (*pieces[:2], "_")) == {"detail": -BIAS, "de": -BIAS}
    assert changed_by(pieces, request, (*pieces[:2], "_", "detail")) == {"_level": -BIAS, "_": -BIAS}


def test_an_array_of_an_enums_values_goes_through_the_list_of_them_its_call_asks_for():
    arguments = ArgumentKinds(enums={"amenities": ("Tennis Court", "Picnic Area", "Playground", "Running Track")})
    request = ("Parks with a Tennis Court and a Picnic Area, then with a Playground and Running Track, and then "
               "with a Tennis Court and a Playground")
    pieces = ['{"name": "f", "arguments": {"amenities": ["', "Tennis Court", "Picnic Area", "Playground",
              "Running Track", '", "', '"]}}, ', '"', '"]', "P", "R", "T"]
    first = (pieces[0], "Tennis Court", '", "')
    # a list of the request's, whole, ends the array, though the enum has more values the request writes
    assert changed_by(pieces, request, (*first, "Picnic Area"), arguments=arguments)['"]'] == BIAS
    # the third call: of the lists that go on from "Tennis Court", the one no array holds yet
    third = (*first, "Picnic Area", '"]}}, ', pieces[0], "Playground", '", "', "Running Track", '"]}}, ', *first)
    assert {piece for piece, change in changed_by(pieces, request, third, arguments=arguments).items()
            if change > 0} == {"Playground", "P"}


PART_PIECES = ['{"name": "magnetic_field", "arguments": {"x": ', '{"name": "electric_field", "arguments": {"x": ',
               "3", "4", "0", "0.5", "25", '{"name": "library_search", "arguments": {"s": "', "Sta", "Starry Night",
               "Sot", "Sotheby", "Har", "Harper Lee", '"']


def part_changes(request: str, *written: str, functions: tuple[str, ...]) -> dict[str, float]:
    return {piece: change for piece, change in changed_by(PART_PIECES, request, written, functions).items()
            if change > 0}


def test_a_call_to_one_of_several_functions_asked_for_takes_the_values_of_its_part_of_the_request():
    request = "What is the electric field at 3m from a charge of 4C? Also, find the magnetic field for 0.5A, 25 turns."
    asked = ("electric_field", "magnetic_field")
    # The magnetic field's first number is the first of its sentence, not the request's first.
    assert part_changes(request, PART_PIECES[0], functions=asked) == {"0": BIAS / 2, "0.5": BIAS / 2}
    assert part_changes(request, PART_PIECES[1], functions=asked) == {"3": BIAS / 2}
    assert part_changes(request, PART_PIECES[0], functions=()) == {"3": BIAS / 2}  # none asked: reading order
    request = "Get the price of Starry Night at Sotheby. Then search the library for books by Harper Lee."
    assert part_changes(request, PART_PIECES[7], functions=("art_price", "library_search")) == {
        "Har": BIAS / 2, "Harper Lee": BIAS / 2}
    assert part_changes(request, PART_PIECES[7], functions=()) == {  # anywhere: any of the request's names
        "Har": BIAS / 2, "Harper Lee": BIAS / 2, "Sta": BIAS / 2, "Starry Night": BIAS / 2, "Sot": BIAS / 2,
        "Sotheby": BIAS / 2}


def test_an_arrays_first_number_is_sure_where_a_list_of_the_requests_begins_there():
    pieces = ['{"name": "f", "arguments": {"x": [', '{"name": "f", "arguments": {"x": ', "2", "3", "4", ", "]
    request = "Analyse building B9 for 2, 3 and 4"
    assert changed_by(pieces, request, (pieces[0],)) == {"2": BIAS}
    assert changed_by(pieces, request, (pieces[0], "2", ", ")) == {"3": BIAS / 2}  # a later item: a guess
    assert changed_by(pieces, "Analyse building 2 for 3 or 4", (pieces[0],)) == {"2": BIAS / 2}  # no list
    assert changed_by(pieces, request, (pieces[1],)) == {"2": BIAS / 2}  # no array


def test_an_array_goes_through_the_list_a_number_beside_its_words_is_in():
    pieces = ['{"name": "f", "arguments": {"floors": [', "2", "3", "4", ", "]
    request = "Analyse building B1004 for 2nd, 3rd and 4th floors"  # "floors" beside the 4
    assert changed_by(pieces, request, (pieces[0],)) == {"2": BIAS}  # the list's first, where it begins
    assert changed_by(pieces, request, (pieces[0], "2", ", ")) == {"3": BIAS / 2}  # on through it, not the 4
    assert changed_by(pieces, "Analyse 2 buildings of 4 floors", (pieces[0],)) == {"4": BIAS}  # no list: beside


def raised_pieces(pieces: list[str], request: str, *written: str) -> dict[str, float]:
    return {piece: change for piece, change in changed_by(pieces, request, written).items() if change > 0}


def test_a_currency_argument_begins_as_the_code_of_the_currency_the_request_names_for_it():
    pieces = ['{"name": "convert", "arguments": {"from_currency": "', '", "to_currency": "', "E", "EUR", "Eur",
              "CAD", "C", "Can", '"', "UR"]
    request = "Convert 150 Euros to Canadian dollars."
    assert raised_pieces(pieces, request, pieces[0]) == {"E": 2 * BIAS, "EUR": 2 * BIAS}
    assert raised_pieces(pieces, request, pieces[0], "E") == {"UR": 2 * BIAS}
    assert raised_pieces(pieces, request, pieces[0], "EUR", pieces[1]) == {"C": 2 * BIAS, "CAD": 2 * BIAS}
    assert changed_by(pieces, request, (pieces[0], "EUR")) == {'"': BIAS}  # whole: it ends


def test_another_arguments_value_does_not_begin_as_a_currency_code_the_request_names_only_in_words():
    pieces = ['{"name": "convert", "arguments": {"from_currency": "JPY"}}, ', '{"name": "units", "arguments": {',
              '"from_unit": "', "J", "JPY", "km", "USD", '{"name": "convert", "arguments": {"from_currency": "']
    request = "Convert 5000 Japanese Yen into USD, then 15 kilometers into miles."
    changes = changed_by(pieces, request, tuple(pieces[:3]))
    assert changes["JPY"] == -BIAS and changes["J"] == -BIAS + BIAS / 2  # (J begins "Japanese Yen" too)
    assert changes["USD"] == BIAS / 2  # written as it is: a name to begin with as any
    assert changed_by(pieces, request, pieces[-1:])["JPY"] == 2 * BIAS  # a currency's argument takes it


def test_a_name_another_call_holds_that_is_written_outside_the_calls_part_is_lowered():
    pieces = ['{"name": "price_find", "arguments": {"platform": "Xbox"}}, ', '{"name": "update_find", "arguments": {',
              '"platform": "', "X", "Xbox", "Play", "Playstation",
              '{"name": "update_find", "arguments": {"platform": "']
    request = "Find the latest update of the game on the Playstation platform, then find the price on the Xbox."
    asked = ("update_find", "price_find")
    changes = changed_by(pieces, request, (pieces[0], pieces[1], pieces[2]), asked)
    assert changes["X"] == changes["Xbox"] == -BIAS  # the price search's, copied
    assert changes["Play"] == changes["Playstation"] == BIAS  # its own part's name, a name after a name
    # First: while the part's own name is in no value yet, a name written only outside it is lowered too.
    assert changed_by(pieces, request, (pieces[7],), asked) == {
        "Play": BIAS / 2, "Playstation": BIAS / 2, "X": -BIAS, "Xbox": -BIAS}
    request = "Find the latest update of the game on Playstation and on the Xbox, then its price on the same Xbox."
    changes = changed_by(pieces, request, (pieces[0], pieces[1], pieces[2]), asked)
    assert changes.get("Xbox", 0) >= 0  # the update's part writes it too


def test_a_part_that_refers_to_what_the_request_wrote_before_may_take_another_calls_name():
    pieces = ['{"name": "update_find", "arguments": {"game": "Halo"}}, ', '{"name": "price_find", "arguments": {',
              '"game": "', "Halo", "Play", "Playstation"]
    asked = ("update_find", "price_find")
    written = (pieces[0], pieces[1], pieces[2])
    request = "Find the latest update of Halo on the Xbox, then the price of the game on Playstation."
    assert changed_by(pieces, request, written, asked)["Halo"] == -BIAS
    request = "Find the latest update of Halo on the Xbox, then the price of the same game on Playstation."
    assert changed_by(pieces, request, written, asked).get("Halo", 0) >= 0  # "the same game": Halo's


def test_an_argument_asked_for_by_a_name_before_its_name_words_is_written_after_the_one_before_it():
    pieces = ['{"name": "update_find", "arguments": {"platform": "Playstation"', ", ", "}}", "}"]
    arguments = ArgumentKinds(strings=frozenset({"platform", "region"}),
                              orders={"update_find": ("platform", "region")})
    request = "Find the latest updates on the Playstation platform for the 'European' region."
    changes = changed_by(pieces, request, (pieces[0],), arguments=arguments)
    assert changes[", "] == BIAS and changes["}}"] == changes["}"] == -BIAS  # region is asked for: it follows
    request = "Find the latest updates on the Playstation platform in Europe."
    assert ", " not in changed_by(pieces, request, (pieces[0],), arguments=arguments)


def test_the_one_number_of_a_functions_part_that_no_value_holds_is_sure():
    pieces = ['{"name": "electric_field", "arguments": {"charge": 4, "distance": ',
              '{"name": "electric_field", "arguments": {"distance": ', "3", "4", "25"]
    request = "What is the electric field at 3m from a charge of 4C? Also, find the magnetic field for 0.5A, 25 turns."
    asked = ("electric_field", "magnetic_field")
    assert changed_by(pieces, request, (pieces[0],), asked) == {"3": BIAS, "25": -BIAS}  # the magnetic field's 25
    assert changed_by(pieces, request, (pieces[1],), asked) == {"3": BIAS / 2, "25": -BIAS}  # 4 is left too: a guess


def test_a_number_another_call_holds_that_is_written_outside_the_calls_part_is_lowered():
    pieces = ['{"name": "gaussian_integral", "arguments": {"lower": -2, "upper": 2}}, ',
              '{"name": "definite_integral", "arguments": {"lower": ', "-", "-2", "2", "0", "3"]
    request = "Perform the Gaussian integral from -2 to 2. Also calculate the definite integral from 0 to 3.1416."
    changes = changed_by(pieces, request, tuple(pieces[:2]), ("gaussian_integral", "definite_integral"))
    assert changes["-"] == changes["-2"] == changes["2"] == -BIAS  # the Gaussian integral's, copied
    assert changes["0"] > 0  # its own part's first
    assert "3" not in changes  # the part's own 3.1416 goes on from it
    spaced = ['{"name": "gaussian_integral", "arguments": {"lower": -2, "upper": 2}}, ',
              '{"name": "definite_integral", "arguments": {"lower":', " -", " -2", " ", " 0"]
    changes = changed_by(spaced, request, tuple(spaced[:2]), ("gaussian_integral", "definite_integral"))
    assert changes[" -"] == changes[" -2"] == -BIAS and " " not in changes  # no space yet: the spaced starts too
    request = "Perform the Gaussian integral from -2 to 2. Also the definite integral of the same from 0 to 3.1416."
    assert "2" not in changed_by(pieces, request, tuple(pieces[:2]), ("gaussian_integral", "definite_integral"))
