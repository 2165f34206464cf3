"""Where a request that asks for several functions asks for each (llmproxy.backends._function_regions)."""

from __future__ import annotations

import pytest

from llmproxy.backends._function_regions import function_regions, in_regions


def parts(request: str, *functions: str, arguments: tuple[str, ...] = ()) -> dict[str, list[str]]:
    return {name: [request[start:end] for start, end in spans]
            for name, spans in function_regions(request, {name: arguments for name in functions}).items()}


@pytest.mark.parametrize(("request_text", "first", "second"), [
    # each function is asked for from its sentence on
    ("What is the electric field at 3m from a charge of 4C? Also, find the magnetic field for 0.5A.",
     ("physics_electric_field", "What is the electric field at 3m from a charge of 4C?"),
     ("physics_magnetic_field", " Also, find the magnetic field for 0.5A.")),
    # within a sentence, a part ends at the last comma, "and" or "then" before the next
    ("Buy a ticket to the Mamma Mia musical on Friday, and a train ticket from New York to Chicago",
     ("musical_ticket_buy", "Buy a ticket to the Mamma Mia musical on Friday, "),
     ("train_ticket_buy", "and a train ticket from New York to Chicago")),
    # a plural of a name word that ends in "e" ("updates") asks for its function
    ("Find the latest updates for the game on Playstation, then find the current price on Xbox.",
     ("games_update_find", "Find the latest updates for the game on Playstation, "),
     ("games_price_find", "then find the current price on Xbox.")),
], ids=["sentences", "within_a_sentence", "plural_of_a_word_in_e"])
def test_each_function_is_asked_for_in_a_part_of_its_own(request_text, first, second):
    assert parts(request_text, first[0], second[0]) == {first[0]: [first[1]], second[0]: [second[1]]}


def test_a_function_asked_for_again_later_has_a_part_there_too():
    request = "Make music in D Minor, then an audio signal of 440 Hz. After that, more music in E Major."
    assert parts(request, "music_generate", "audio_generate") == {
        "music_generate": ["Make music in D Minor, ", " After that, more music in E Major."],
        "audio_generate": ["then an audio signal of 440 Hz."]}


def test_words_the_functions_share_ask_for_none_of_them():
    # "field" is both's: only "electric" marks a part, and one function's part alone divides nothing.
    assert parts("The field at 3m. Also the electric field at 2m.", "electric_field", "magnetic_field") == {}
    assert parts("Anything at all", "electric_field") == {}


def test_a_word_of_another_functions_arguments_asks_for_none_of_them():
    # "speed" is displacement's initial_speed: the request asks for the displacement alone.
    request = "The displacement of a car at an initial speed of 20 m/s for 5 seconds?"
    assert set(parts(request, "calculate_displacement", "calculate_final_speed")) == {
        "calculate_displacement", "calculate_final_speed"}
    assert parts(request, "calculate_displacement", "calculate_final_speed", arguments=("initial_speed",)) == {}


def test_a_place_is_in_a_part_where_one_holds_it():
    assert in_regions(3, [(0, 4)]) and in_regions(10, [(0, 4), (8, 12)])
    assert not in_regions(4, [(0, 4)]) and not in_regions(5, [])


def test_a_word_that_describes_another_functions_argument_asks_for_its_function_nowhere_else():
    request = "The electric field at 3m of a 4C charge? Also, the magnetic field of an electric current of 0.5A."
    functions = {"electric_field": ("charge", "distance"), "magnetic_field": ("current", "length")}
    assert function_regions(request, functions) == {
        "electric_field": [(0, request.index(" Also"))], "magnetic_field": [(request.index(" Also"), len(request))]}
    alone = "Find an electric current of 0.5A, then the magnetic field."  # its only word: it still asks
    assert set(function_regions(alone, functions)) == {"electric_field", "magnetic_field"}
