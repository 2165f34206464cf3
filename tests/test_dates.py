"""The dates a request writes, and the arguments that take a date in a format of their own
(llmproxy.backends._dates); how the grounding proposes them is in tests/test_value_grounding.py."""

from __future__ import annotations

import datetime

import pytest

from llmproxy.backends._dates import date_formats, dates_in, without_dates, written_dates
from llmproxy.syntaxes.base import ChoosableFunction


@pytest.mark.parametrize(("text", "dates"), [
    ("the British Museum for this weekend, Jun.20,2023.", ["2023-06-20"]),
    ("starting from March 10th, 2023 for 3 nights", ["2023-03-10"]),
    ("starting from 10th December 2022.", ["2022-12-10"]),
    ("starting from 15th October,2023", ["2023-10-15"]),
    ("the 1st of June 2022", ["2022-06-01"]),
    ("from July 10, 2022 to July 20, 2022", ["2022-07-10", "2022-07-20"]),
    ("in Paris from 2023 April 4th to April 8th?", ["2023-04-04", "2023-04-08"]),  # the year from before
    ("on 05/12/2022, then on 2021-01-28", ["2022-05-12", "2021-01-28"]),  # a US date: month first
])
def test_a_date_is_read_however_the_request_writes_it(text, dates):
    assert [str(date) for date in written_dates(text)] == dates


@pytest.mark.parametrize("text", [
    "what is due on June 20th?",  # no year anywhere
    "in May 2022",  # no day
    "you may 12 times try",  # the verb
    "on June 31st, 2023",  # no such day
    "the 2022-2023 season",
    "version 10.2 of 2021",
])
def test_what_is_no_whole_date_is_none(text):
    assert written_dates(text) == []


def test_the_dates_of_a_text_are_blanked_out_and_found_in_a_call_however_it_writes_them():
    assert without_dates("2 rooms on Jun.20,2023 for 3 nights") == "2 rooms on             for 3 nights"
    dates = written_dates("from July 10, 2022 to July 20, 2022")
    call = '{"from_date": "07-10-2022", "to_date": "2022/07/20", "note": "2022-07-10"}'
    assert dates_in(call, dates) == {datetime.date(2022, 7, 10): 2, datetime.date(2022, 7, 20): 1}
    assert dates_in('{"day": "July 10"}', dates) == {}


def function(**properties: dict) -> ChoosableFunction:
    return ChoosableFunction("f", "", "", parameters={"type": "object", "properties": properties})


def test_an_argument_takes_a_date_in_the_format_its_schema_prescribes():
    formats = date_formats([function(
        a={"type": "string", "description": "The check-in date in the format YYYY-MM-DD."},
        b={"type": "string", "description": "The starting date of the stay in format MM-DD-YYYY."},
        c={"type": "string", "description": "Format - DD-MM-YYYY."},
        d={"type": "string", "description": "The date for the rainfall prediction, in the format mm/dd/yyyy"},
        e={"type": "string", "description": "Accepts standard date format e.g., 2022-04-28."},
        f={"type": "string", "format": "date"},
        start_date={"type": "string", "description": "The date when your stay begins."},  # named, no format: ISO
    )])
    assert formats == {"a": "%Y-%m-%d", "b": "%m-%d-%Y", "c": "%d-%m-%Y", "d": "%m/%d/%Y", "e": "%Y-%m-%d",
                       "f": "%Y-%m-%d", "start_date": "%Y-%m-%d"}
    assert datetime.date(2022, 7, 10).strftime(formats["b"]) == "07-10-2022"


def test_an_argument_whose_format_is_no_whole_date_or_is_not_shown_takes_none():
    assert date_formats([function(
        a={"type": "string", "description": "Start time for the period (YYYY-MM-DD HH:MM:SS)"},
        b={"type": "string", "description": "Date of the concert in 'mm-yyyy' format"},
        season={"type": "string", "description": "Specific season in format 'YYYY-YYYY'"},
        date={"type": "string", "description": "The date in the format the venue uses."},  # a format, not shown
        date_format={"type": "string", "description": "The desired date format"},
        due_date={"type": "integer", "description": "Days from now."},
        city={"type": "string", "description": "The city."},
    )]) == {}
