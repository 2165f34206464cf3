"""Whether another call follows, after each call of a chosen answer whose calls are JSON objects.

A chosen call (llmproxy.backends._choice_sampling) whose syntax can write several is written as a single
call is, and more may follow it: ``{"name": ...}, {"name": ...}`` (the json syntax reads objects back to
back as a list). After each call the answer either goes on (the separator, ``,``) or ends (an
end-of-generation token). Left to itself, a small model ends after one call almost every time, whatever
was asked; where it goes on, it writes calls nobody asked for. So:

First, a list's items: where a string value of the last call, other than one of the request's names, is
followed in the request by items of a list that no call holds yet (llmproxy.backends._listed_items:
"copper" of "the resistivity of copper and aluminum"), another call follows, whatever else the request
says: such items are plain words as often as names, which the rules below do not see. So does one where
the last call gave an argument a value of its enum (or of the choices its description quotes) that the
request writes with others of them, and one of those is in no call yet ("the last six months, the last
year, and the last five years"). So does one while
there are fewer calls than the tasks or cases the request counts out ("The first car ... The second car
...": ``counted_steps``): there are at least that many calls in 106 of the 108 parallel and
parallel_multiple answers of BFCL whose requests count so; of its simple_python, multiple and irrelevance
requests, one counts (a step, a call).

Then, the answer is one call where the request does not say it asks for several things ("respectively",
"then", "also", "both", "the same for" ..., or a clause that begins another task: "Additionally, ...", "...
and book a hotel") and either several functions are offered or it lists no names or numbers ("Seattle,
Boston and Chicago", "5 and 10") and writes fewer than two dates. Of BFCL's non-live requests, 180 of the
200 of the first kind ask for one call (all of multiple's; the others are parallel_multiple's), and 319 of
the 341 of the second (simple_python's; the others are parallel's); the
calls a small model goes on to write there use values the first left over ("Miami, Florida": a second call
for Florida), to another function where it can. A request that asks for several of the offered functions,
each in a part of its own (llmproxy.backends._function_regions: "the record for the most points in one
game, ...; in one season, ...; in his career"), asks for several things too: 15 of the 200 of the first
kind ask for functions so, 10 of the 20 that ask for several calls and 5 of the 180 that ask for one
(where each answer's calls are written in turn, the choices end it where it ends in 143 of
parallel_multiple's 200, was 134; in 186 of multiple's 200, was 191).

Then the functions: where the request says it asks for several things and names several of the offered
functions in its words (llmproxy.decide.asked_functions), another call follows while one of those is not
called yet ("Find the area of a rectangle ... Also, calculate the area of a circle"), unless the last two
calls each went back to a function called before them: SmolLM2 called the event date search ten times
over, each with another state, and never the chess rating asked for.

Then the values. A request that asks for several calls names values for each, and calls rarely use values
the request does not hold; so the values the request writes decide, numbers, names (runs of capitalised
words other than a sentence's first, and quoted text) and dates (llmproxy.backends._dates: however a call
writes them; their numbers and month names are none of the others) each on their own, a number counted
as often as the request writes it (the 1 of "5, 6 and 1, then 3, 2 and 1" twice):

- the last call used some numbers of a list the request writes ("for 10, 20 and 30 years"), not all, and
  one of the list is in no call yet: the calls go through the list, and another follows;
- the last call used a name of a list of names the request writes that no call before used, and a name of
  that list is in no call yet: the same, even once each function asked for is called ("the exhibitions of
  the Louvre, then the best Italian and Chinese restaurants": a restaurant call for each);
- the last call used values of a kind not used before, and at least as many of that kind are in no call
  yet: the calls are still covering the request (a call for each of Seattle, Boston and Chicago), and
  another follows; where the request says it asks for several, any value of the kind in no call yet will
  do (a second call varies one value of the first: "then repeat with a change in time of 10 seconds"),
  but not once each of several functions it asks for is called: a call more, to one of them again, is
  held to as many values as the last used (with any, 46 of BFCL's 200 parallel_multiple requests went on
  past their answer's calls, 31 now; where each answer's calls are written in turn, the choices end the
  answer where it ends in 128 of them, was 120; in 115 of parallel's 200, was 111, with the list's rule),
  one of them a value no call holds at all: the second "2018" of "from 2018 to 2019. In 2018 ..." asks for
  no call of its own (SmolLM2 went on to the growth rate again, with the first's years; with this, 134 of
  parallel_multiple's 200 end where they do, was 131, the other categories as they were);
- else (all are used; fewer are left than another call would use; the last call used none not used
  before): the answer ends;
- the request writes none: the model's own margin for going on (over ending), raised by ``continue_bias``,
  decides.

A number written as an exponent ("m/s^2", "x^2") is no value: 26 of BFCL's non-live requests write one,
and one answer's value among them is such a number. With this, the list's items, the counted tasks and
the days of the week (``written_names``), where each answer's calls are written in turn, the choices end
the answer where it ends in 131 of parallel's 200 (was 119), 129 of parallel_multiple's (was 128), 390 of
simple_python's 400 (was 389) and 191 of multiple's 200; with the lists of names and of an enum's values,
136 of parallel's and 131 of parallel_multiple's (the others as they were).

A call made again word for word ends the answer too. A token can close a call and go on in one (``},``):
those are held back while a call is being closed, so the choice is made on its own, once the call is whole.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmproxy.backends._dates import dates_in, without_dates, written_dates
from llmproxy.backends._function_regions import function_regions
from llmproxy.backends._json_chars import JSONChars
from llmproxy.backends._listed_items import items_left
from llmproxy.common.asks_for_several import asks_for_several
from llmproxy.common.word_overlap import content_words

# A comma between digits separates thousands where three digits follow it ("2,000,000"), else numbers ("5,10").
_NUMBER = re.compile(r"(?<![\w.^])[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")
_PERCENT_AFTER = re.compile(r"\s*(?:%|per ?cent\b)", re.IGNORECASE)
# A number and the word after it make one value ("50 million" is 50000000): in every BFCL answer where a
# request writes one (12 of them), the value is the whole of it.
_SCALE_AFTER = re.compile(r"\s*(thousand|million|billion|trillion)\b", re.IGNORECASE)
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_CLOSING = r"\s*(\}+)\s*"  # and then the separator
_CAPITALISED_WORD = r"[A-Z](?:[\w'&-]|\.(?=\w))*\.?"  # D.C. and Inc. too
_CODE_AFTER = r"(?:(?<=[a-z]), [A-Z]{2,3}\b)?"  # a state's or country's code: "Boston, MA"
_CAPITALISED_RUN = re.compile(rf"(?<!\w){_CAPITALISED_WORD}(?:(?<!\.)\s+(?:of\s+)?{_CAPITALISED_WORD})*{_CODE_AFTER}")
# A day of the week is a date's word, not a name: "concerts near Berlin and Paris next Friday" asks for two
# calls, and with Friday a name, the first (Berlin, next Friday) used two names, left one, and ended the answer.
_WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
_QUOTED = re.compile(r"\"([^\"]{2,40})\"|(?<!\w)'([^']{2,40})'(?!\w)")  # a name, not a quoted question
# The words with which a request counts out its tasks or cases ("First, ... Second, ... Lastly, ...", "the
# first car ..., the second car ..."); "lastly" and "finally" count as one more.
_ORDINAL = re.compile(r"\b(?:(first|second|third|fourth|fifth|sixth)(?:ly)?|(lastly|finally))\b", re.IGNORECASE)
_LETTER = re.compile(r"(?<![\w°])[A-Z](?!\w)")  # a capital letter on its own (not the C of 0°C)
# What stands between two names of a list: its comma or "and", and an article perhaps ("a Tennis Court and a
# Picnic Area").
_LISTED_NEXT = re.compile(r"(?:,\s*(?:and\s+|&\s+)?|\s+(?:and|&)\s+)(?:(?:a|an|the)\s+)?")
_LISTED_NUMBERS = re.compile(r"\d[\d.,]*\s*\w{0,12}\s*(?:,|and|&)\s*\d")  # "5 and 10", "5m, 10m"
_WORD = re.compile(r"[A-Za-z]+")
_CALL_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_CLAUSE_END = re.compile(r"[,;:!?]|\.(?!\d)")  # a number's words are its clause's
_NEAR_CHARS = 40  # characters either side of a number that its words are read from
# "one" is left out: it is a pronoun as often as a number ("one of the ...").
_NUMBER_WORDS = {word: str(value) for value, word in enumerate(
    ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"), start=2)}
_NUMBER_WORD = re.compile(rf"\b(?:{'|'.join(_NUMBER_WORDS)})\b", re.IGNORECASE)
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)[\"'(\[]*$")
# What stands between two numbers of a list: a unit, perhaps, then the list's comma or "and" ("10, 20 and 30
# years", "5m, 10m", "$500 and $700").
_BETWEEN_LISTED_NUMBERS = re.compile(r"\s*[A-Za-z%°²³]{0,12}\.?\s*(?:,\s*(?:and\s+|&\s+)?|(?:and|&)\s+)\$?")


def numbers(text: str) -> set[str]:
    """The numbers written in ``text``, as digits (thousands separators and a leading + dropped)."""
    return set(numbers_in_order(text))


def numbers_in_order(text: str) -> list[str]:
    """The numbers written in ``text``, as ``numbers`` writes them, in the order written."""
    return [_digits(found, text) for found in _NUMBER.finditer(text)]


def number_places(text: str) -> list[int]:
    """Where in ``text`` each number ``numbers_in_order`` gives starts."""
    return [found.start() for found in _NUMBER.finditer(text)]


def _digits(found: re.Match[str], text: str) -> str:
    """The number ``found`` in ``text`` as digits: its word of scale multiplied in ("2.5 million": 2500000)."""
    digits = found.group().replace(",", "").lstrip("+").rstrip(".")
    scale = _SCALE_AFTER.match(text, found.end())
    return digits if scale is None else f"{float(digits) * _SCALES[scale.group(1).lower()]:.15g}"


def number_words(text: str) -> list[frozenset[str]]:
    """For each number ``numbers_in_order`` gives, the content words (llmproxy.common.word_overlap) of the
    three words before it and the two after it within its clause ("5 years ago": year, ago)."""
    return [_words_around(text, found) for found in _NUMBER.finditer(text)]


def worded_numbers(text: str) -> list[tuple[str, frozenset[str]]]:
    """The numbers ``text`` writes as words, two to twelve ("two adults"), as digits, each with its words
    as ``number_words`` reads them."""
    return [(_NUMBER_WORDS[found.group().lower()], _words_around(text, found)) for found in _NUMBER_WORD.finditer(text)]


def _words_around(text: str, found: re.Match[str]) -> frozenset[str]:
    before = _CLAUSE_END.split(text[max(0, found.start() - _NEAR_CHARS):found.start()])[-1]
    after = _CLAUSE_END.split(text[found.end():found.end() + _NEAR_CHARS])[0]
    return content_words(" ".join(_WORD.findall(before)[-3:] + _WORD.findall(after)[:2]))


def percent_marks(text: str) -> list[bool]:
    """For each number ``numbers_in_order`` gives, whether ``text`` writes it as a percentage (5 %, 5 percent)."""
    return [_PERCENT_AFTER.match(text, found.end()) is not None for found in _NUMBER.finditer(text)]


def number_lists(text: str) -> list[tuple[str, ...]]:
    """The lists of numbers ``text`` writes ("for 10, 20 and 30 years"), each as the values of its numbers
    (``amounts``), in order."""
    return [tuple(value for _, value in listed) for listed in _listed_numbers(text)]


def number_list_starts(text: str) -> dict[int, int]:
    """For each place in ``numbers_in_order`` of a number of a list of ``number_lists``, where its list begins."""
    return {place: listed[0][0] for listed in _listed_numbers(text) for place, _ in listed}


def _listed_numbers(text: str) -> list[list[tuple[int, str]]]:
    """The lists of numbers ``text`` writes, each as its numbers' places in reading order and values."""
    lists, run, end = [], [], -1
    for place, found in enumerate(_NUMBER.finditer(text)):
        if not (run and _BETWEEN_LISTED_NUMBERS.fullmatch(text, end, found.start())):
            lists.append(run)
            run = []
        run.append((place, f"{float(_digits(found, text)):.12g}"))
        end = found.end()
    lists.append(run)
    return [listed for listed in lists if len({value for _, value in listed}) > 1]


def amounts(text: str) -> Counter[str]:
    """The values of the numbers written in ``text``, however written (8, 8.0, 8.00), each as many times as
    it is written."""
    return Counter(f"{float(number):.12g}" for number in numbers_in_order(text))


def used_amounts(call: str, asked: Counter[str]) -> Counter[str]:
    """Which of the request's ``asked`` amounts a call's text holds, each as many times as it does (up to as
    many as are asked): as written, or as a fraction where the request wrote a percentage (5 % as 0.05)."""
    used: Counter[str] = Counter()
    for value, times in amounts(call).items():
        percentage = f"{float(value) * 100:.12g}"
        used[value if value in asked else percentage] += times
    return used & asked


def names(text: str) -> set[str]:
    """The names written in ``text``, lower-cased (``written_names``)."""
    return {name.lower() for name in written_names(text)}


def written_names(text: str) -> set[str]:
    """The names written in ``text``, as written: runs of capitalised words, "of" between them too ("Boreal
    Forests of Canada": SmolLM2 wrote "Boreal Forests", and a call more for "Canada"; a sentence's first word
    is not a name on its own: "Find" in "Find flights to Paris"; "Paris" is), with the code of a state or
    country after a comma ("Boston, MA": a call that holds "Boston" holds it), and quoted text."""
    found = {quoted for match in _QUOTED.finditer(text) for quoted in match.groups() if quoted}
    for match in _CAPITALISED_RUN.finditer(text):
        words = match.group().rstrip(".'").split()
        if _SENTENCE_START.search(text[:match.start()]) or words[0] == "I" or words[0].startswith("I'"):
            words = words[2:] if words[1:2] == ["of"] else words[1:]  # "Fans of Manchester City"
        if words and len(words[0]) > 1 and not set(words) <= _WEEKDAYS:  # a single letter is too weak a
            found.add(" ".join(words))  # name: the C of 0°C
    return found


def listed_names(request: str, names: set[str]) -> frozenset[str]:
    """The ``names`` (lower-cased) that the request follows with another of them, as a list does: "Seattle"
    and "Boston" of "Seattle, Boston and Chicago"."""
    listed = set()
    for name in names:
        for found in re.finditer(re.escape(name), request):
            between = _LISTED_NEXT.match(request, found.end())
            if between is not None and any(request.startswith(other, between.end()) for other in names):
                listed.add(name.lower())
    return frozenset(listed)


def name_lists(request: str, names: set[str]) -> list[frozenset[str]]:
    """The lists of ``names`` the request writes ("Seattle, Boston and Chicago"), each as its names lower-cased:
    a run of names, each but the first after another as a list does, but not two with a comma alone between
    ("Rome, Italy"). A single capital letter is a name here ("C, F and G"), though not on its own
    (``written_names``)."""
    at: dict[int, str] = {}  # the longest name that starts at each place
    for name in names | set(_LETTER.findall(request)):
        for found in re.finditer(re.escape(name), request):
            if len(name) > len(at.get(found.start(), "")):
                at[found.start()] = name
    lists, inside = [], set()
    for start in sorted(at):
        if start in inside:
            continue
        run, end, joints = [at[start]], start + len(at[start]), []
        while (between := _LISTED_NEXT.match(request, end)) is not None and between.end() in at:
            inside.add(between.end())
            run.append(at[between.end()])
            joints.append(between.group().strip())
            end = between.end() + len(run[-1])
        if len(run) > 2 or joints and joints[-1] != ",":  # "Rome, Italy" is a place and its country
            lists.append(frozenset(name.lower() for name in run))
    return lists


def names_in(call: str, asked: set[str]) -> set[str]:
    """Which of the ``asked`` names a call's JSON text holds (a name inside a value, or a value inside a
    name that is most of it: "New York" for "New York City", not "Vegan" for "Vegan Salad")."""
    values = {_plain(value) for value in _strings(call) if len(value) > 1}
    return {name for name in asked
            if any(_plain(name) in value or (value in _plain(name) and 2 * len(value) > len(name)) for value in values)}


def _plain(text: str) -> str:
    """``text`` lower-cased, its underscores spaces: Louvre_Museum is the Louvre Museum."""
    return text.lower().replace("_", " ")


def _strings(call: str) -> list[str]:
    """The string values in a call's JSON text (none where it does not read as JSON)."""
    try:
        found, values = [], [json.loads(call)]
    except ValueError:
        return []
    while values:
        value = values.pop()
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            values.extend(value.values())
        elif isinstance(value, list):
            values.extend(value)
    return found


@dataclass(frozen=True)
class ListTokens:
    """What each token of a vocabulary (by its text) does to calls that more may follow: how many objects
    it closes before it goes on (writes the ``separator``) - 0 where it does not - and whether, between
    calls, it goes on (1) or ends the answer (2: an end-of-generation token)."""

    closes_then: np.ndarray  # objects closed by a token that then goes on
    leads: np.ndarray  # 1: goes on, 2: ends the answer, 0: neither (whitespace, anything else)

    @classmethod
    def of(cls, pieces: Sequence[str], ends: Collection[int], separator: str) -> ListTokens:
        closing = re.compile(_CLOSING + re.escape(separator[:1]))
        closes_then = np.zeros(len(pieces), dtype=np.int16)
        leads = np.zeros(len(pieces), dtype=np.int8)
        for token, piece in enumerate(pieces):
            closed = closing.match(piece)
            if closed is not None:
                closes_then[token] = len(closed.group(1))
            leads[token] = 2 if token in ends else 1 if piece.lstrip().startswith(separator) else 0
        return cls(closes_then, leads)


class ListContinuation:
    """Follows the JSON of a chosen answer's calls, token by token (``accept``), and at the end of each call
    makes the answer's next step a choice between going on and ending (``adjust``, on the raw logits of the
    step, before the token is drawn)."""

    def __init__(self, tokens: ListTokens, pieces: Sequence[str], request: str, bias: float,
                 functions: Collection[str] = (), offered: int = 1,
                 enum_values: Mapping[str, Sequence[str]] | None = None,
                 arguments_of: Mapping[str, Sequence[str]] | None = None) -> None:
        self._tokens = tokens
        self._pieces = pieces
        undated = without_dates(request)  # a date is a value of its own, not numbers and a name
        self._dates = Counter(written_dates(request))
        self._numbers = amounts(undated)
        self._number_lists = [frozenset(listed) for listed in number_lists(undated)]
        written = written_names(undated)
        self._names = {name.lower() for name in written}  # (``names``)
        self._name_lists = name_lists(undated, written)
        self._request = request
        # Several functions asked for, each in a part of its own, ask for several calls too ("the record for
        # the most points in one game, ...; in one season, ...; in a career").
        self._asks_for_several = asks_for_several(request) or bool(
            function_regions(request, {name: (arguments_of or {}).get(name, ()) for name in functions}))
        self._steps = counted_steps(request)
        self._bias = bias
        self._functions = functions  # the functions the request asks a call to each of
        # the arguments of which the request writes two values of their enum or more, and those values
        self._enum_lists = {key: values for key, values in (enum_values or {}).items() if len(values) > 1}
        self._one_call = not self._asks_for_several and (offered > 1 or not (
            listed_names(undated, written) or _LISTED_NUMBERS.search(undated)
            or self._dates.total() > 1))
        self._calls: list[str] = []  # the text of each call written
        self._call = ""  # the call being written
        self._json = JSONChars()
        self._call_ended = False  # a call was closed, and the answer has not gone on since
        self.choices: list[bool] = []  # each choice made: True where the answer went on

    def adjust(self, logits: np.ndarray) -> None:
        if self._json.in_string:
            return
        depth = len(self._json.open)
        if depth > 0:  # inside a call: none of its closing tokens may also go on
            logits[self._tokens.closes_then == depth] = -np.inf
            return
        if not self._call_ended:
            return
        more, done = self._tokens.leads == 1, self._tokens.leads == 2
        coverage = self._coverage()
        if coverage == 0:
            coverage = _log_sum_exp(logits[more]) - _log_sum_exp(logits[done]) + self._bias
        goes_on = coverage > 0
        self.choices.append(goes_on)
        logits[~(more if goes_on else done)] = -np.inf  # the separator now, or the end: nothing else

    def accept(self, token: int) -> None:
        for char in self._pieces[token]:
            depth = len(self._json.open)
            if depth > 0 or char == "{":
                self._call += char
            if self._json.step(char):
                continue
            if depth == 1 and not self._json.open:  # the call's closing brace
                self._call_ended = True
                self._calls.append(self._call)
                self._call = ""
            elif depth == 0 and not self._json.in_string and not char.isspace():  # the separator: it went on
                self._call_ended = False

    def _coverage(self) -> int:
        """+1 where a function the request asks for is not called yet, where the last call went into a list
        of numbers not all called yet, or where it used numbers (or names) of the request not used before
        and at least as many are in no call yet; 0 where the request holds none (and the last call is new);
        else -1: also where one call is asked for."""
        *earlier_calls, last_call = self._calls
        if last_call in earlier_calls:
            return -1
        if self._items_left(last_call) or self._enum_list_goes_on() or len(self._calls) < self._steps:
            return 1
        if self._one_call:
            return -1
        if self._asks_for_several and uncalled(self._functions, "".join(self._calls)) and not self._went_back():
            return 1
        several_functions = len(self._functions) > 1  # and each is called: a call more is one of them again
        if not several_functions and self._list_goes_on():
            return 1
        if self._names_list_goes_on():
            return 1
        if not (self._numbers or self._names or self._dates):
            return 0
        any_left = self._asks_for_several and not several_functions
        kinds = ((self._numbers, lambda call: used_amounts(call, self._numbers)),
                 (Counter(self._names), lambda call: Counter(names_in(call, self._names))),
                 (self._dates, lambda call: dates_in(call, list(self._dates)) & self._dates))
        for asked, used_by in kinds:
            *before, last = [used_by(call) for call in self._calls]
            earlier = sum(before, Counter())
            new, left = last - earlier, asked - earlier - last
            held = earlier + last
            fresh = not several_functions or any(not held[value] for value in left)
            if new and fresh and left.total() >= (1 if any_left else new.total()):
                return 1
        return -1

    def _went_back(self) -> bool:
        """Whether the last two calls are each to a function an earlier call is to: the answer goes round
        the functions it calls, not on to one it has not (SmolLM2 called the event date search ten times
        over, each with another state, while the chess rating asked for was left uncalled)."""
        functions = [_function_of(call) for call in self._calls]
        return len(functions) > 2 and all(function in functions[:-2] for function in functions[-2:])

    def _items_left(self, call: str) -> bool:
        """Whether an argument of ``call`` has a value (other than one of the request's names: those are
        counted as names) that the request follows with items of a list that no call holds yet
        (llmproxy.backends._listed_items: "copper", of "copper and aluminum")."""
        held = [value for written in self._calls for value in _strings(written)]
        return any(items_left(self._request, value, held) for value in _argument_strings(call)
                   if value.lower() not in self._names)

    def _enum_list_goes_on(self) -> bool:
        """Whether the last call gave an argument a value of its enum that the request writes with others
        and no call before gave it, and one of those others is in no call yet ("the precipitation for the
        last six months, the last year, and the last five years": a call each)."""
        *before, last = [_arguments_of(call) for call in self._calls]
        held = {value for arguments in (*before, last) for value in arguments.values() if isinstance(value, str)}
        for key, values in self._enum_lists.items():
            value = last.get(key)  # (an array holds several of the values itself: no call each)
            earlier = {arguments.get(key) for arguments in before if isinstance(arguments.get(key), str)}
            # (not one another argument holds: "teaspoons in 2 tablespoons" asks for one conversion)
            if isinstance(value, str) and value in values and value not in earlier and set(values) - held:
                return True
        return False

    def _names_list_goes_on(self) -> bool:
        """Whether the last call used a name of a list of names the request writes that no call before used,
        and a name of that list is in no call yet: the calls go through the list ("the best Italian and Chinese
        restaurants", a call each)."""
        *before, last = [names_in(call, self._names) for call in self._calls]
        new, held = last - set().union(*before), last.union(*before)
        return any(new & listed and listed - held for listed in self._name_lists)

    def _list_goes_on(self) -> bool:
        """Whether the last call used some of a list of numbers the request writes, not all, and a number of
        that list is in no call yet: the calls go through the list ("10, 20 and 30 years", a call each)."""
        used = [set(used_amounts(call, self._numbers)) for call in self._calls]
        return any(used[-1] & listed and not listed <= used[-1] and listed - set().union(*used)
                   for listed in self._number_lists)


def _argument_strings(call: str) -> list[str]:
    """The string values of the arguments of a call's JSON text: not an array's items, which are one value."""
    return [value for value in _arguments_of(call).values() if isinstance(value, str)]


def _arguments_of(call: str) -> dict[str, object]:
    """The arguments of a call's JSON text (its object's objects' members; none where it does not read as
    JSON)."""
    try:
        found = json.loads(call)
    except ValueError:
        return {}
    objects = [value for value in found.values() if isinstance(value, dict)] if isinstance(found, dict) else []
    return {key: value for arguments in objects for key, value in arguments.items()}


def counted_steps(request: str) -> int:
    """How many tasks or cases a request counts out with ordinal words (``_ORDINAL``), where it writes
    "first": each of those words once; 0 where it does not."""
    counted = {(found.group(1) or "last").lower() for found in _ORDINAL.finditer(request)}
    return len(counted) if "first" in counted else 0


def _function_of(call: str) -> str:
    """The name of the function the JSON text of a call is to ("" where it names none)."""
    found = _CALL_NAME.search(call)
    return found.group(1) if found else ""


def uncalled(functions: Collection[str], calls: str) -> list[str]:
    """Which of ``functions`` no call in the JSON text ``calls`` names."""
    return [name for name in functions if f'"{name}"' not in calls]


def _log_sum_exp(values: np.ndarray) -> float:
    if not len(values):
        return float("-inf")
    peak = float(values.max())
    return peak if peak == float("-inf") else peak + float(np.log(np.exp(values - peak).sum()))
