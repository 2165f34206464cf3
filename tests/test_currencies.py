"""The currencies a request names, as codes, and which a currency argument takes (llmproxy.backends._currencies)."""

from __future__ import annotations

import pytest

from llmproxy.backends._currencies import currency_for, is_currency_argument, written_currencies


def codes_of(request: str) -> list[tuple[str, bool, bool]]:
    return [(mention.code, mention.origin, mention.destination) for mention in written_currencies(request)]


def test_a_currencys_name_is_read_as_its_code_the_longer_name_first():
    assert codes_of("Convert 150 Euros to Canadian dollars.") == [("EUR", True, False), ("CAD", False, True)]
    assert codes_of("the exchange rate from British pounds to Japanese yen") == [
        ("GBP", True, False), ("JPY", False, True)]
    assert codes_of("How much is 100 euro in USD?") == [("EUR", True, False), ("USD", False, True)]
    assert codes_of("a dollar of no country") == [("USD", False, False)]
    assert codes_of("the Yenisei river weighs 3 pounds sterlingly") == []  # words only as whole words


@pytest.mark.parametrize("request_text, keys, expected", [
    ("How many Canadian dollars can I get for 500 US dollars?", ("base_currency", "target_currency"),
     ["USD", "CAD"]),  # after an amount: where the conversion starts
    ("the current cost in British Pounds if I need to convert 200 US dollars", ("from_currency", "to_currency"),
     ["USD", "GBP"]),
    ("the rates of USD to AUD and USD to CAD", ("base_currency", "target_currency") * 2, ["USD", "AUD", "USD", "CAD"]),
    ("5000 Euros into US Dollars, then another 3000 Euros into British Pounds", ("from_currency", "to_currency") * 2,
     ["EUR", "USD", "EUR", "GBP"]),
    ("Messi's net worth in Euros, then LeBron James's in British Pounds", ("currency", "currency"), ["EUR", "GBP"]),
])
def test_a_currency_argument_takes_the_next_code_of_its_side(request_text, keys, expected):
    mentions, given, taken = written_currencies(request_text), {}, []
    for index, key in enumerate(keys):
        held = taken[-1:] if index % 2 and keys[0] != keys[1] else []  # the call's other argument
        code = currency_for(key, mentions, given.get(key, []), held)
        given.setdefault(key, []).append(code)
        taken.append(code)
    assert taken == expected


def test_no_currency_named_is_no_code_and_only_a_currencys_argument_takes_one():
    assert currency_for("currency", written_currencies("the price of a winter jacket"), [], []) == ""
    assert is_currency_argument("baseCurrency") and is_currency_argument("to_currency")
    assert not is_currency_argument("amount")
