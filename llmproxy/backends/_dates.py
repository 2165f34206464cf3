"""The dates a request writes, and the arguments that take a date in a format of their own.

A request writes a date as people do ("March 10th, 2023", "10th December 2022", "Jan.28,2021", "from 2023
April 4th to April 8th"); a function takes it as its schema says ("in the format YYYY-MM-DD", "Format -
DD-MM-YYYY"), or, where a date argument says nothing of its format, as ISO 8601 writes it. Of the 64 dates in
BFCL's non-live answers, 48 are written otherwise in their requests; SmolLM2 copies the request's words
("Jun.20,2023") or makes a date up ("2023-04-15" for April 4th). So the grounding
(llmproxy.backends._value_grounding) proposes the request's dates, as the argument writes them.
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.syntaxes.base import ChoosableFunction

ISO_DATE = "%Y-%m-%d"

_MONTHS = {name: number for number, names in enumerate(
    ("jan january", "feb february", "mar march", "apr april", "may", "jun june", "jul july", "aug august",
     "sep sept september", "oct october", "nov november", "dec december"), start=1) for name in names.split()}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>[12]\d{3})"
# Each form a date is written in; the year may be left out where an earlier date or year gives it.
_WRITTEN = [re.compile(rf"\b{form}(?!\w)", re.IGNORECASE) for form in (
    rf"{_YEAR}-(?P<number>[01]?\d)-{_DAY}",  # 2023-06-20
    rf"(?P<number>[01]?\d)/{_DAY}/{_YEAR}",  # 06/20/2023, as written in the US
    rf"{_MONTH}\s*{_DAY}(?:\s*,\s*|\s+){_YEAR}",  # June 20th, 2023; Jun.20,2023
    rf"{_DAY}\s+(?:of\s+)?{_MONTH}\s*,?\s*{_YEAR}",  # 20th June 2023; 15th October,2023
    rf"{_YEAR}\s+{_MONTH}\s*{_DAY}",  # 2023 June 20th
    rf"{_MONTH}\s*{_DAY}",  # June 20th (the year from before)
    rf"{_DAY}\s+(?:of\s+)?{_MONTH}",  # 20th of June
)]
_A_YEAR = re.compile(rf"\b{_YEAR}\b")
# A format a description prescribes for a whole date, with no time after it ("YYYY-MM-DD HH:MM" is no date).
_FORMAT = re.compile(r"\b(yyyy|mm|dd)([-/.])(yyyy|mm|dd)\2(yyyy|mm|dd)\b(?!\s*[T ]?\s*hh)", re.IGNORECASE)
_ISO_EXAMPLE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_STRFTIME = {"yyyy": "%Y", "mm": "%m", "dd": "%d"}
_ORDERS = (("%Y", "%m", "%d"), ("%m", "%d", "%Y"), ("%d", "%m", "%Y"))


def written_dates(text: str) -> list[datetime.date]:
    """The dates ``text`` writes, in the order written; one without a year takes the last year written
    before it (none where there is none)."""
    return [date for _, _, date in _date_spans(text)]


def without_dates(text: str) -> str:
    """``text`` with the dates it writes blanked out: its numbers and names are then the values it writes
    besides dates (the 20 and 2023 of "Jun.20,2023" are no number a call must hold, nor "Jun" a name)."""
    for start, end, _ in _date_spans(text):
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def dates_in(call: str, dates: Sequence[datetime.date]) -> Counter[datetime.date]:
    """Which of ``dates`` a call's text holds, each as often as it does, written as any date argument
    writes dates (year, month and day in any order, split by - or /)."""
    held: Counter[datetime.date] = Counter()
    for date in set(dates):
        forms = {date.strftime(separator.join(order)) for separator in "-/" for order in _ORDERS}
        held[date] = sum(call.count(form) for form in forms)
    return +held


@bounded_cache(MIB)  # a request's text is read for its dates by the grounding and the continuation alike
def _date_spans(text: str) -> tuple[tuple[int, int, datetime.date], ...]:
    """Where ``text`` writes each date (``written_dates``), in order."""
    found: list[tuple[int, int, re.Match[str]]] = []
    for form in _WRITTEN:
        for match in form.finditer(text):
            if not any(start < match.end() and match.start() < end for start, end, _ in found):  # a longer form's
                found.append((match.start(), match.end(), match))
    spans = []
    for start, end, match in sorted(found, key=lambda entry: entry[0]):
        parts = match.groupdict()
        years = _A_YEAR.findall(text[:start])
        year = parts.get("year") or (years[-1] if years else None)
        if year is None or parts.get("month") == "may":  # "may" in lower case is a verb far more often
            continue
        month = int(parts["number"]) if parts.get("number") else _MONTHS[parts["month"].lower()]
        try:
            spans.append((start, end, datetime.date(int(year), month, int(parts["day"]))))
        except ValueError:  # no such day: not a date
            continue
    return tuple(spans)


def date_formats(functions: Sequence[ChoosableFunction]) -> Mapping[str, str]:
    """The string arguments of ``functions`` that take a date, each with the format (for ``strftime``) its
    schema prescribes: one it writes out ("in the format MM-DD-YYYY"), ISO 8601 where it shows an example
    of that, or says nothing of a format for an argument named as a date. Not one whose format is other
    (a month, a date and a time, a format no pattern shows)."""
    formats = {}
    for function in functions:
        properties = function.parameters.get("properties")
        for name, schema in (properties.items() if isinstance(properties, Mapping) else ()):
            if isinstance(schema, Mapping) and schema.get("type", "string") == "string":
                found = _format(name, str(schema.get("description", "")), schema.get("format"))
                if found is not None:
                    formats[name] = found
    return formats


def _format(name: str, description: str, schema_format: object) -> str | None:
    pattern = _FORMAT.search(description)
    if pattern is not None:
        parts = (pattern.group(1), pattern.group(3), pattern.group(4))
        if sorted(part.lower() for part in parts) != ["dd", "mm", "yyyy"]:
            return None
        return pattern.group(2).join(_STRFTIME[part.lower()] for part in parts)
    if schema_format == "date" or _ISO_EXAMPLE.search(description):
        return ISO_DATE
    named = "date" in name.lower() and "format" not in name.lower()
    return ISO_DATE if named and "format" not in description.lower() else None
