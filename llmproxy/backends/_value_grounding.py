"""A chosen call's values held to what the request wrote: a value begun as the request writes one goes on
as the request does.

SmolLM2 writes a number digit by digit and ends it where the grammar lets it: "an initial investment of
$2000" became ``200``, "$50000" ``500``. A string it cuts the same way. So while a call's value is being
written, where what is written so far is the start of a value the request holds (a number written there,
thousands separators left out; a run of its text, for a string of two characters or more) and no value
the request holds ends there, the tokens that go on as the request does get ``bias`` nats (twice that
for a number two characters long or more: "$5,000,000" was still cut to ``500000``; and for a string cut
inside a word, unless what is left of the word is a plural's "s": SmolLM2 went from "Gala" of "Galapagos
Islands" to "Gala Islands", and of the 1,930 string values of BFCL's non-live answers that a request
writes, 19 end inside a word, 12 of them before a plural's "s"): the model still
draws, and the grammar still decides what may be drawn. A number the request writes with a word of scale
is the whole of it ("50 million": 50000000, as BFCL's answers take it every time). Where what a string
value has so far stands in the request right before a word that joins it to what follows ("in", "to",
"with" ...) or at a sentence's end, the string's end gets the bias instead: "Natural History Museum" of "the
Natural History Museum in London", where SmolLM2 went on to "... in London"; "GameSpot" of "... from
GameSpot.", where it went on to "GameSpot. Note that ..."; not where the value begins a quotation ('Ticket
to Ride'), nor for an argument whose schema prescribes a format ("e.g. San Francisco, CA": the request's
"San Francisco?" is no place to end it).

Of the tokens that go on as the request does along a string, those are raised that end where the model's
tokenizer ends a piece of the text it would be (the value so far and its rest), where any does: "al"
after "G" of "Galapagos", which the tokenizer writes "Gal" "apagos"; raised onto "ala" as well, SmolLM2
went on from "Gala" to "Gala Islands"; raised onto "T" as well as "To" (the tokenizer's "To" "kyo"), it
began "T" and went on to "Taipei" for "Tokyo".

A later call's function is held too: its name, as it is written, goes on as the name of a function the
request asks for and no call names yet (llmproxy.decide.asked_functions), where one does, with twice the
bias: at the bias, SmolLM2 wrote an earlier call again, word for word, which ends the answer (in each of
the 4 parallel_multiple answers with too few calls that were traced); with twice, 12 of a 50-case run's
answers (seed 34) had too few calls, not 17.
And a later call to the same function as the call before goes on to the arguments that one gave: after
each value, the separator gets the bias (and the end of the arguments is lowered by as much) while the
call before gave an argument this one has not yet (calls that go through a list share the rest: SmolLM2
wrote ``"include_description": true`` in the first call of three and left it out of the others).

A date is held to the request's dates as the argument writes them (llmproxy.backends._dates), from its
first character: "2023-06-20" for "Jun.20,2023" where the schema asks for YYYY-MM-DD; a date no call holds
yet first ("from July 10, 2022 to July 20, 2022": the second date argument takes the second), with twice
the bias once four characters are written (SmolLM2 wrote "2023-04-8" for April 8th against the bias
alone). Begun otherwise, it is held as any string.

An argument the request asks for in its own words (llmproxy.backends._asked_arguments) is written: after each
value, while one of the call's later arguments is asked for and not given, the separator gets the bias (the
end of the arguments is lowered by as much: drawn without a repetition penalty, SmolLM2 closed them against
the raised separator: "Get me two tickets ..." without ``num_tickets``), and so does the key of the first such
one as it is written; a boolean asked for gets it on true (``include_description`` for "... and a brief
description of each", where SmolLM2 wrote false as often as not, or left it out), an enum asked for is one
whose value the request writes ("by public transit"), and its value is that one, from the first character
(SmolLM2 wrote the "Wi-Fi" its description names as the default for "a sushi restaurant with a patio"). A
string argument whose description quotes two values or more ("Choices are 'trapezoid' or 'simpson'") has those
as its enum: of the values of BFCL's non-live answers for such arguments, where the request writes one of the
quoted values, 127 of 138 are one it writes (SmolLM2 wrote the description's default, "trapezoid", for "...
using simpson method"). So do the examples a description names without quotes ("e.g., one-way, round-trip",
"either major or minor", "(walk, bike, transit, drive)"; not a format's parts: "e.g. New York, NY"), where the
request writes one: of the 66 such arguments of BFCL's non-live answers, 65 take one it writes (SmolLM2 wrote
"restaurant_search" and "string": a single value chosen so, as any outside an array, starts at twice the
bias). Of the values the request writes, the first that no value holds yet is the one: "aluminum" in the call
after "copper" for "the resistivity of copper and aluminum" (of such values of BFCL's non-live answers where
the request writes two or more, 118 of 122 that no value before holds are that first one; SmolLM2 gave
Barcelona the "La Liga" of "in the UEFA Champions League and La Liga respectively"). An argument with an enum
or such choices none of which the request writes, whose schema or description names one as its default
("Default 'Daily'"), takes that one where it is written at all: of the 32 such optional arguments of BFCL's
non-live answers, 29 accept the default (SmolLM2 wrote "Monthly" for "currently"). A schema's words ("string")
are no start of either.

A currency argument (its name says "currency", and it has no enum) takes the code of the currency the request
names for it (llmproxy.backends._currencies): "EUR" for "150 Euros", from its first character with twice the
bias, and its end once whole. Every one of the 49 currency values of BFCL's non-live answers takes the code,
31 the name as written too; the argument's side (where the conversion starts, where it ends) and the codes its
earlier values took pick the currency for all 49 (SmolLM2 wrote "Euros" and "Canadian dollars"). Another
argument's value does not begin as the code of a currency the request names only in words (SmolLM2 gave the
unit conversion after "5000 Japanese Yen into US Dollars" a ``from_unit`` of "JPY").

An argument the request holds no value for is left out: after a value, where each argument after it in
its function's order is optional, not asked for, and either a number while the call holds each of the
request's numbers, or one with an enum none of whose values the request writes, the end of the arguments
gets the bias, and the separator is lowered by as much (SmolLM2 gave ``compound_freq`` 2 for "... at an
annual interest rate of 2.5%", ``min_humidity`` 65 for "the humidity in Miami in the upcoming 7 days").
Booleans and other strings are left to the model: a request may well say theirs in other words.

An array of strings ends at its first item that repeats an earlier one: its end gets twice the bias, going
on is lowered by as much. None of the 252 arrays of strings in BFCL's answers (the live ones too) holds one
item twice, and SmolLM2, drawn without a repetition penalty, wrote "Italian", "Italiano", "Italiano" ...
to the token limit. So does an array of numbers once a run of two or more of its numbers is written twice
in a row: none of the 120 arrays of numbers in BFCL's non-live answers holds one (4 hold a number twice
in a row: [16, 16]), and SmolLM2 wrote [0.6, 0.8, 0.6, 0.8 ...] to the token limit for "trait A
contributing to 40% of the fitness and trait B 60%".

A number value that is one of the request's, whole (none of its numbers goes on from it), gets the bias
on its end: SmolLM2 wrote 7012345678901234 for "the factorial of 7". So does one the request writes as a
word beside the argument's own words, where no number in digits stands beside them ("two adults": 2, where
SmolLM2 went on to the 2023 of the request's date); its first digit gets half the bias, as a guess. Of
the number values of BFCL's non-live answers whose argument's words stand beside such a word and beside
no number in digits, 19 of 26 are that word's number.

An array of numbers goes through a list of numbers the request writes (llmproxy.backends._list_continuation.
number_lists: "coefficients 3, -2 and 1"): after each item, while its items are some of such a list, the
separator gets the bias, and once they are all of it (a number it writes twice, twice), the array's end (95
of the 109 arrays of numbers in BFCL's non-live answers are such a list, whole; SmolLM2 wrote "[0.7, 0.8,
0.9, 1.3, 2.4, ...]" for "0.7, 0.8, and 0.9"). An array of an enum's values goes on until it holds those
the request writes, and ends there (["Patio"] for "with a patio", where SmolLM2 went on through the enum:
"Wi-Fi", "Happy Hour" ...), taking them in the order the request writes them (29 of the 29 such answers
that hold the whole list keep that order). So does an array of strings once it holds all the names of a list the request
writes ("a progression of C, F and G", where SmolLM2 went on to ["C", "F", "G", "C"]): of the 31 arrays of
strings in BFCL's non-live answers that hold a name of such a list, 24 are all its names and nothing more,
1 holds them and more. That comes first, for an enum's values too, and an array that holds some of such a
list goes on with the rest of it, of a list no array before holds where one is ("parks with a Tennis Court
and a Picnic Area ..., and with a Tennis Court and a Playground": SmolLM2 wrote all four in each call).

A string value that is the first word or words of a name of two words or more that the request writes
("Manchester" of "Manchester United") goes on as the name does with twice the bias: SmolLM2 wrote
"Manchester City". Of BFCL's non-live answers' string values that begin with the first word of such a
name, 647 hold the whole name and 37 do not ("Fender" of "Fender American Professional II Stratocaster").
So does a name the request writes with a state's or country's code after it ("Los Angeles, CA"), once what
is before the code is written: where the request writes such a name and an answer's value begins with what
is before its code, 58 of 59 values take the whole name, 29 what is before the code alone.
So does a string value of one character that begins names the request writes, with three times the bias:
as one of them (of those answers' string values whose first character begins a name of the request's,
1,362 begin that name or are begun by it, 40 do not: "AAPL" for "Apple"), where SmolLM2 went on from the
"M" it had written at its own pace to "Manchester United" for "the rating of Magnus Carlsen"; at twice the
bias it still went from "G" to "Gabon" for "Galapagos Islands", from "T" to "Taipei" for "Tokyo".

A later call to the same function as the call before, where that one gave an argument a value the request
follows with items of a list (llmproxy.backends._listed_items: "copper" of "a resistivity of copper and
aluminum"), gives the argument the first of those items that no value holds yet: its first token gets
twice the bias (at the bias SmolLM2 wrote "copper" again), the tokens that go on as it does the bias, and
so does its end once it is whole.

Three more guesses get half that (a start is a guess where a continuation is near certain):

- a string value's first token, where it begins a name the request writes (llmproxy.backends.
  _list_continuation.written_names) and no value of the call holds yet: "Magnus Carlsen" for a player, not
  the "Manchester United" a small model likes better; "Philadelphia" for the destination after "New York"
  for the source (any of them, where every one is used). Where the request asks for several functions in
  parts of their own, those written in the call's function's part, where any are (the game reviews' region
  "American", where SmolLM2 wrote the "Xbox" of the price search's part); and the first tokens of a name an
  earlier call holds that the request writes only outside such a part holding names of its own are lowered
  by the bias, unless the part refers back ("the same game", "in each city"): of the string values of
  BFCL's parallel_multiple answers whose function's part holds names and writes no such words, none is a
  name outside the part that another call holds (74 are a name in the part that another call holds too;
  SmolLM2 gave the game update's platform the "Xbox" of the price search's); so are those of every name the
  request writes only outside the part while one of the part's names is in no value yet (of the string values
  of BFCL's multiple and parallel_multiple answers written so, 6 of 495 are such a name; SmolLM2 gave the turtles of
  "Galapagos Islands" the "New York" of the directions' part). In a later call, where the call
  before gave the same argument one of the request's names, this is no guess: the calls go through the names
  the request lists, so a name no call holds yet ("Vegan Salad" for the second call's dish after the first's
  "Chicken Noodle Soup") gets the whole bias, and once begun, the value goes on as such a name does, not as
  others the request writes ("dataset2" after the first call's "dataset1", where SmolLM2 went from "dataset"
  to the "1" again) - less the names listed with a value the call before gave another argument ("the best
  Italian and Chinese restaurants in the area of Paris": the location stays Paris, the food goes on from
  Italian to Chinese; SmolLM2 wrote the location "Chinese"). An argument that names where something starts
  (``_from``, ``start_location``, ``origin``, ``source``, ``departure...``) or ends (``to``,
  ``destination``, ``end...``, ``target``, ``arrival``) begins, with the whole bias, as the name the request
  writes right after "from" or "to" (quoted too), the first no call gave it yet: of the 142 such values of
  BFCL's non-live answers, 108 are that name (most others are currency codes);
- a value's first token, where it begins the request's next number in reading order: the one after the
  number the answer's last number value was (the first, before any): a request names its values in
  the order the calls take them far more often than not ("coefficients 5, 6 and 1 ..., then 3, 2 and 1":
  a=5, b=6, c=1, then a=3, b=2, c=1), where a small model picks among them at random - unless that
  number stands beside none of the argument's own words and another does: then the first of those the
  argument has not had yet ("5 years ago" for ``period_in_years``, not the "$7000" that follows "$5000";
  in a later call, "3 years ago"; inside an argument's value that is an object, its own key's words:
  "width" of ``"area": {"width": ...}``). With the answers' values written before each, the guess is the
  answer's for 1,368 of the 1,667 number values of BFCL's non-live answers (reading order alone: 1,266);
  for 827 of the 963 where it stands beside the argument's words, so that guess gets the whole bias; so
  does a later call's to the same function as the call before: the calls go through the request's numbers
  (with the answers written before each, the guess is the answer's for 144 of 261 such values that stand
  beside none of their argument's words, where the value of the call before is for 89; drawn without a
  repetition penalty, SmolLM2 wrote the first call's a=5, b=6, c=1 again for "5, 6 and 1 ... 3, 2 and 1");
  so does an array's first item where a list of the request's numbers begins there: of the first items of
  BFCL's non-live arrays of numbers that their requests write, 74 of the 77 guessed where a list begins are
  that list's first number; and an array whose first number stands beside the argument's words in such a
  list begins at the list's first, and its later items go on through the list ("2nd, 3rd and 4th floors":
  2, 3, 4, where SmolLM2 wrote [4, 10, 2, 3, 4] after the 4 beside "floors"): with the answers' values
  written before each, the guess is the answer's for 1,754 of the 2,358 number values of BFCL's non-live
  answers, 1,694 without. Where the request asks for several functions, each in a part of its own
  (llmproxy.backends._function_regions), a call's guess is held to its function's part: past it, the first
  number there that no value holds yet; and of the numbers standing beside the argument's words, those
  there ("the magnetic field for a current of 0.5A": the magnetic field's first number, not the request's).
  A number the request writes only outside the call's function's part, where the part holds numbers and
  does not refer back, has its first tokens lowered by the bias while one of the part's numbers is in no
  value yet (of the number values of BFCL's parallel_multiple answers so placed, 6 of 317 are such a
  number; SmolLM2 gave the electric field "at 3m" the 25 of the magnetic field's part), and after, where an
  earlier call holds it, as such a name is (4 of 307: SmolLM2 gave the definite integral "from 0 to
  3.1416" the Gaussian integral's -2 and 2, begun as " -" where no space was written yet: those starts
  too). The one number of the part that no value holds yet gets the whole bias: of the number values of
  BFCL's parallel_multiple answers whose function's part holds one such number, 164 of 188 are it.
  Once such a value is begun, it goes on as that number does where several of the request's go on from
  what is written (11, not 15, after "8:20 and 11:50"), or where what is written is a later number of the
  request (1000, not 10, for "a principle of $1000 ... over 10 years"), and it ends where it is that
  number whole though others go on from it (3, not 3000, for "2500 square feet, 3 rooms" before "3000
  square feet"). A
  percentage is guessed as the fraction it is (0.05 for 5 %), as most functions take rates, except for an
  argument whose schema describes a percentage (and no decimal or fraction): in BFCL's answers, 69 of 81
  percentages are fractions for the first kind, 16 of 22 written as the request does for the second.
  Such a fraction's start gets the whole bias: at half, SmolLM2 still wrote 5 for 5 % in 11 of the 14
  such values of the last release's BFCL run where it wrote one. So does a negative number's sign, twice
  over, and as " -" where no space is written yet: a digit first can be no negative number (of the number
  values of BFCL's non-live answers whose requests write them negative, 23 of 23 are negative; SmolLM2
  wrote 2 for "from x = -2" against the whole bias, and once a space is written, "2" is 14 nats above "-");
- the end of a string value that is a whole name the request lists with others ("New York, Los Angeles
  and Tokyo"): one call each, where a small model writes the list into one value;
- the separator after an argument's value, while numbers of the request are in none of the answer's
  calls yet: "an acceleration of 9.8" written as the optional argument it is, not left out.

A string value that goes on as another of the call's argument values does is lowered by the bias (its
end, where it is that value whole), unless the request writes that value twice: of the 4,103 string and
number values of BFCL's non-live answers, 12 repeat another of their call's. So is one that goes on as
the function's name, from its start or from a word's. Drawn without a repetition penalty
(llmproxy.backends.base.CALL_PENALTIES), SmolLM2 gave "variant" the "Manchester United" it had just
given "player_name", "category" the name of the function called, and "name" "Louvre_Museum_get_hours"
in a call to ``museum_get_hours``. So is one that goes on as its argument's own name, where the request
does not write that, from the value's start or as a word of its own after the value's: SmolLM2 gave
``detail_level`` the value "detail_level" for "Give me detail information about stocks of Apple Inc.", then
"detailed_detail_level" (of the 3,505 string values BFCL's non-live answers accept, 1 begins so).

A later call that so far is an earlier one, writing that one's last argument, is held off that one's value
(llmproxy.backends._call_copy): the tokens that go on as it does are lowered by twice the bias, but not
those that also go on as another value the argument may take (another of its enum's values, another of the
request's numbers or names), and nothing where no other goes on from what is written.
SmolLM2 wrote "$6,000,000 ... 2,500,000 shares" a second time for "... keeping 2,000,000 shares", and the
repeated call ended the answer. A boolean is left alone: of BFCL's 124 such last values, 7 are booleans,
and in a 50-case run (parallel, seed 34) SmolLM2, held off ``true``, went on to a call nobody asked for
with ``false`` twice, where the repeated call had ended the answer. So is a call of a request that
neither says it asks for several things (llmproxy.common.asks_for_several) nor lists
names or values of one enum ("the last six months, the last year, and the last five years"): there, a
call repeated is a call too many, and held off the copy SmolLM2 wrote a second call to the NPV of "cash
flows ... discounted at 8%" with a rate of 3.0.

And one is lowered by twice the bias: a string value that starts as a word of JSON Schema's types
("string", "integer" ...), or of Python's ("list", "tuple"), or as "json" or "function", where the request
does not write that word. Those words are the prompt's (each parameter's schema, the calls' format), not the
user's: SmolLM2 gives an argument named ``type`` the value "string", "json", "list" or "function" (no value
of BFCL's non-live answers begins so). And an
empty value - a string or an array, written whole in one token (' ""', ' [],') or closed as soon as opened -
is lowered by the bias, by twice that for a required argument: in the answers of the last release's BFCL
run (325 cases), all 8 calls that held one were wrong ("location": "" for "sushi ... in Boston"); in
BFCL's non-live answers, one of 1,790 required strings may be empty, one of 242 required arrays.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from llmproxy.backends._asked_arguments import asked_enums, asked_names, asked_numbers, asked_true
from llmproxy.backends._call_copy import CallCopy
from llmproxy.backends._currencies import currency_for, is_currency_argument, written_currencies
from llmproxy.backends._dates import date_formats, without_dates, written_dates
from llmproxy.backends._function_regions import Span, function_regions, in_regions
from llmproxy.backends._json_chars import JSONChars
from llmproxy.backends._listed_items import items_left
from llmproxy.backends._list_continuation import (amounts, listed_names, name_lists, number_lists, number_list_starts,
                                                  number_places, number_words, numbers, numbers_in_order,
                                                  percent_marks, uncalled, used_amounts, worded_numbers,
                                                  written_names)
from llmproxy.common.asks_for_several import asks_for_several
from llmproxy.common.word_overlap import content_words
from llmproxy.syntaxes.base import ChoosableFunction

MIN_STRING = 2  # characters of a string value before it is held to the request's text
_SURE_DIGITS = 2  # characters of a number value, as a request's begins, past which it is held twice as hard
_SURE_DATE = 4  # characters of a date, as one of the request's begins (its year, mostly), past which the same
_NUMBER_ITEM = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # a number as JSON writes it
_LOOK_AHEAD = 16  # characters of the request's text after a match that tokens are looked up for
_NUMBER_CHARS = frozenset("0123456789.-+eE")
_CALL_DEPTH = 1  # a call's object: its one string value is the function's name
_ARGUMENTS_DEPTH = 2  # a call's object, then its arguments' object
_AFTER_STRING = " \n,}]"
_SCHEMA_WORDS = ("string", "integer", "number", "boolean", "object", "array", "float", "dict", "json", "list", "tuple",
                 "function")
_SCHEMA_WORD = re.compile(rf"\b(?:{'|'.join(_SCHEMA_WORDS)})", re.IGNORECASE)
_PERCENTAGE = re.compile(r"percent|%", re.IGNORECASE)
_FRACTION = re.compile(r"decimal|fraction", re.IGNORECASE)
# Where a string value ends: before a word that joins it to the next thing the request writes, or at a
# sentence's end (?, ! or . then a space, or the text's end), except after an abbreviation ("Inc.", "D.C.":
# a last word of three characters or fewer, or one that holds a full stop). "of" is left out (18 values of
# BFCL's answers stand before it, 39 hold it). Of the 1,930 string values in BFCL's non-live answers that a
# request writes as they are, 853 end at such a place, and 15 hold a part that does ("Golden Gate Bridge" of
# "Golden Gate Bridge in San Francisco", "New York" of "New York Yankees" where "New York" ends a sentence).
_JOINING_WORD = re.compile(r"\s+(?:in|to|from|with|for|on|at|by|and|during|between|over)\b")
_SENTENCE_END = re.compile(r"[?!]|\.(?!\S)|$")
_ABBREVIATION = re.compile(r"(?:^|\s)\S{1,3}$|\.\S*$")
_QUOTES = "'\"‘“"
_BACK_REFERENCE = re.compile(r"\b(?:same|each|both|these|those|it|them|there)\b", re.IGNORECASE)
# An argument that names where something starts, or where it ends, by a word of its name; and the word the
# request writes before such a name ("from Seattle", "to Boston").
_ORIGIN_WORDS = frozenset({"from", "start", "origin", "source", "departure"})
_DESTINATION_WORDS = frozenset({"to", "end", "destination", "target", "arrival"})
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+")
# The values held off a copy: strings and numbers. Not booleans: held off true, SmolLM2 went on to a call
# nobody asked for with false (the module's docstring says more).
_COPIED_STARTS = frozenset('"-0123456789')
_WORD_BREAKS = " _-."  # where a word of a string value may begin: after these
_POSSESSIVE = re.compile(r"'s?$")  # "Albert Einstein's" names Albert Einstein
_PLURAL_END = re.compile(r"e?s\b")  # what a plural adds to a word: a value may well be the singular
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')  # a JSON string's text (escapes as written)
_ARRAY = re.compile(r"\[([^\[\]]*)\]")  # an array's items (of an array that holds none)
# A value a description quotes (a choice: "'trapezoid' or 'simpson'"). Of the string values of BFCL's non-live
# answers for arguments whose descriptions quote two or more, where the request writes one of those, 127 of
# 138 are one the request writes.
_QUOTED_CHOICE = re.compile(r"(?<!\w)'([^'\n]{1,30})'(?!\w)|\"([^\"\n]{1,30})\"")
# Values a description names as examples or choices without quotes ("e.g., one-way, round-trip", "either
# major or minor"): up to the sentence's end, a bracket or "etc". Where the request writes one of them, it is
# the value as an enum's would be (``ArgumentKinds.choices``).
_EXAMPLES = re.compile(r"\b(?:e\.g\.?|such as|for example|like|either|can be|one of|options are)[,:]?\s+"
                       r"([^.;()]*?)(?:\.(?:\s|$)|;|\)|\(|\betc\b|$)", re.IGNORECASE)
_EXAMPLE_BREAK = re.compile(r",\s*(?:or\s+|and\s+)?|\s+(?:or|and)\s+")
_CODE = re.compile(r"[A-Z]{2,3}")  # "New York, NY" is a format's example, no choice of two
_BRACKETED = re.compile(r"\(([^()]*)\)")
_MOST_EXAMPLE_WORDS = 3  # an example of more words is a sentence of the description's
# The default a description names ("Default 'Daily'", "Default is 'major'.", "defaults to annually").
_DEFAULT = re.compile(r"\bdefaults?(?: value)?(?: is| to|:)?\s+(?:['\"]([^'\"\n]{1,30})['\"]|([\w-]+))", re.IGNORECASE)
# A description that prescribes a format, or shows one by an example of two parts ("e.g. Boston, MA").
_FORMAT = re.compile(r"\bformat|\b(?:e\.g\.|such as|for example)[^.]*\w, \w", re.IGNORECASE)


@dataclass(frozen=True)
class GroundingTokens:
    """A vocabulary (by its tokens' text) as the grounding looks it up, made once per model: the token of
    each text, and the tokens that begin with an argument separator."""

    token_of: Mapping[str, int]
    separators: tuple[int, ...]
    closers: tuple[int, ...]  # the tokens that end a string value: a quote, then nothing but JSON's punctuation
    empties: tuple[int, ...] = ()  # the tokens that write an empty string or array whole (' ""', ' [],')
    array_closers: tuple[int, ...] = ()  # the tokens that begin with the end of an array
    number_ends: tuple[int, ...] = ()  # the tokens that end a number: whitespace, or JSON's , } ] after it
    object_closers: tuple[int, ...] = ()  # the tokens that begin with the end of an object

    @classmethod
    def of(cls, pieces: Sequence[str]) -> GroundingTokens:
        token_of: dict[str, int] = {}
        for token, piece in enumerate(pieces):
            token_of.setdefault(piece, token)

        def tokens(test: Callable[[str], bool]) -> tuple[int, ...]:
            return tuple(token for token, piece in enumerate(pieces) if test(piece))

        return cls(token_of, tokens(lambda piece: piece.lstrip().startswith(",")),
                   tokens(lambda piece: piece.startswith('"') and not piece[1:].strip(_AFTER_STRING)),
                   tokens(lambda piece: piece.lstrip().startswith(('""', "[]")) and '"""' not in piece),
                   tokens(lambda piece: piece.lstrip().startswith("]")),
                   tokens(lambda piece: bool(piece) and (piece.isspace() or piece.lstrip()[:1] in (",", "}", "]"))),
                   tokens(lambda piece: piece.lstrip().startswith("}")))


@dataclass(frozen=True)
class ArgumentKinds:
    """What the offered functions' schemas say of their arguments (by name) that their values are held to."""

    whole_percentages: frozenset[str] = frozenset()  # take 5 for 5 %, not 0.05 (``whole_percentages``)
    formatted: frozenset[str] = frozenset()  # prescribe a format (``formatted_arguments``)
    required: frozenset[str] = frozenset()  # required by their function's schema
    date_formats: Mapping[str, str] = field(default_factory=dict)  # take a date, in this format (_dates.date_formats)
    booleans: frozenset[str] = frozenset()  # take true or false
    numbers: frozenset[str] = frozenset()  # take a number (an integer or not)
    strings: frozenset[str] = frozenset()  # take a string
    enums: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # take (or their items take) these strings
    orders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # each function's arguments, in order
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # strings named by these examples
    # a string chosen from an enum or examples: its default where that is one of them, by (function, argument)
    defaults: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def choices(self) -> dict[str, tuple[str, ...]]:
        """The values each argument with an enum or examples (``described_examples``) may be chosen from: where
        the request writes some (``asked_enums``), the value is one of those."""
        return {**self.examples, **self.enums}

    @classmethod
    def of(cls, functions: Sequence[ChoosableFunction]) -> ArgumentKinds:
        required = {name for function in functions if isinstance(function.parameters.get("required"), list)
                    for name in function.parameters["required"] if isinstance(name, str)}
        return cls(whole_percentages(functions), formatted_arguments(functions), frozenset(required),
                   date_formats(functions), _typed(functions, "boolean"),
                   _typed(functions, "integer") | _typed(functions, "number"), _typed(functions, "string"),
                   _enums(functions),
                   {function.name: tuple(_properties(function)) for function in functions},
                   _examples(functions), _chosen_defaults(functions))


def _goes_on_as(written: str, value: str) -> bool:
    """Whether the JSON text ``written`` (leading whitespace aside) is the start of ``value``, or all of it
    with nothing but whitespace or JSON's punctuation after."""
    written = written.lstrip()
    return value.startswith(written) or (written.startswith(value) and not written[len(value):].strip(" \n,}]"))


def whole_percentages(functions: Sequence[ChoosableFunction]) -> frozenset[str]:
    """The arguments of ``functions`` whose schemas describe a percentage, and no decimal or fraction: those
    take 5 for 5 %, not 0.05."""
    return _described(functions, lambda text: bool(_PERCENTAGE.search(text) and not _FRACTION.search(text)))


def formatted_arguments(functions: Sequence[ChoosableFunction]) -> frozenset[str]:
    """The arguments of ``functions`` whose schemas prescribe a format ("in the format of 'City, State'", "e.g.
    San Francisco, CA"): their values end as the format does, not where the request's words do."""
    return _described(functions, lambda text: _FORMAT.search(text) is not None)


def _typed(functions: Sequence[ChoosableFunction], type_name: str) -> frozenset[str]:
    """The arguments of ``functions`` whose schemas give them the type ``type_name`` (alone or among others)."""
    return frozenset(name for function in functions for name, schema in _properties(function).items()
                     if schema.get("type") == type_name
                     or (isinstance(schema.get("type"), list) and type_name in schema["type"]))


def _enums(functions: Sequence[ChoosableFunction]) -> dict[str, tuple[str, ...]]:
    """The string values of each argument's enum (or its items' enum), for the arguments of ``functions``
    that have one; for a string argument without one, the values its description quotes, where it quotes
    two or more (``described_choices``)."""
    found = {}
    for function in functions:
        for name, schema in _properties(function).items():
            items = schema.get("items")
            enum = schema.get("enum") or (items.get("enum") if isinstance(items, dict) else None)
            if isinstance(enum, list) and (values := tuple(value for value in enum if isinstance(value, str))):
                found[name] = values
            elif schema.get("type") == "string" and (values := described_choices(schema.get("description"))):
                found[name] = values
    return found


def _examples(functions: Sequence[ChoosableFunction]) -> dict[str, tuple[str, ...]]:
    """The examples (``described_examples``) of the string arguments of ``functions`` that have no enum and
    whose descriptions quote no choices."""
    return {name: values for function in functions for name, schema in _properties(function).items()
            if schema.get("type") == "string" and not schema.get("enum")
            and not described_choices(schema.get("description"))
            and (values := described_examples(schema.get("description")))}


def _chosen_defaults(functions: Sequence[ChoosableFunction]) -> dict[tuple[str, str], str]:
    """The default of each string argument of ``functions`` with an enum or examples, where its schema or its
    description names one of those as the default ("Default 'Daily'")."""
    defaults = {}
    for function in functions:
        kinds = {**_examples([function]), **_enums([function])}
        for name, schema in _properties(function).items():
            if name not in kinds or schema.get("type") != "string":
                continue
            default = schema.get("default")
            if not isinstance(default, str) and isinstance(schema.get("description"), str):
                found = _DEFAULT.search(schema["description"])
                default = found and (found.group(1) or found.group(2))
            if default in kinds[name]:
                defaults[function.name, name] = default
    return defaults


def described_examples(description: object) -> tuple[str, ...]:
    """The values a string argument's description names, unquoted, as examples or choices of two or more
    ("e.g., one-way, round-trip"), or lists in brackets ("(walk, bike, transit, drive)"), but not a format's
    parts ("e.g. New York, NY")."""
    if not isinstance(description, str):
        return ()
    if found := _EXAMPLES.search(description):
        listed = "" if re.search(r"\bformat", description, re.IGNORECASE) else found.group(1)
    else:  # or a list in brackets: "(walk, bike, transit, drive)"
        listed = next((found.group(1) for found in _BRACKETED.finditer(description) if "," in found.group(1)), "")
    values = tuple(dict.fromkeys(value.strip(" '\"") for value in _EXAMPLE_BREAK.split(listed.strip(" ,"))))
    if (len(values) < 2 or not all(values) or any(_CODE.fullmatch(value) for value in values)
            or any(len(value.split()) > _MOST_EXAMPLE_WORDS for value in values)):
        return ()
    return values


def described_choices(description: object) -> tuple[str, ...]:
    """The values a string argument's description quotes ("Choices are 'trapezoid' or 'simpson'"), where it
    quotes two or more: its choices as an enum would name them."""
    if not isinstance(description, str):
        return ()
    quoted = dict.fromkeys(single or double for single, double in _QUOTED_CHOICE.findall(description))
    return tuple(quoted) if len(quoted) > 1 else ()


def _names_after(request: str, word: str, names: Collection[str]) -> list[str]:
    """The ``names`` the request writes right after ``word`` ("from Seattle", "to the Louvre"), in the order
    written (each once)."""
    found = sorted((match.start(), name) for name in names for match in
                   re.finditer(rf"\b(?i:{word})\s+(?:the\s+)?[{_QUOTES}]?{re.escape(name)}(?!\w)", request))
    return list(dict.fromkeys(name for _, name in found))


def _properties(function: ChoosableFunction) -> dict[str, dict]:
    """The schemas of a function's arguments, by name, in order (an empty one where it is no object)."""
    properties = function.parameters.get("properties")
    return {name: schema if isinstance(schema, dict) else {}
            for name, schema in (properties.items() if isinstance(properties, dict) else ())}


def _described(functions: Sequence[ChoosableFunction], test: Callable[[str], bool]) -> frozenset[str]:
    """The arguments of ``functions`` whose names and descriptions, together, pass ``test``."""
    return frozenset(name for function in functions for name, schema in _properties(function).items()
                     if test(f"{name} {schema.get('description', '')}"))


class ValueGrounding:
    """Follows a call's JSON token by token (``accept``) and raises the tokens that continue the value being
    written as the request does (``adjust``, on the step's raw logits, before the token is drawn)."""

    def __init__(self, tokens: GroundingTokens, pieces: Sequence[str], request: str, bias: float,
                 functions: Sequence[str] = (), arguments: ArgumentKinds | None = None,
                 split: Callable[[str], Sequence[str]] | None = None) -> None:
        self._pieces = pieces
        self._split = split  # the pieces the model's tokenizer writes a text in, where it is known
        self._bounds: dict[str, frozenset[int]] = {}  # where those pieces of each string value end
        self._token_of = tokens.token_of
        self._separators = list(tokens.separators)
        self._text = request
        self._lowered_text = request.lower()
        undated = without_dates(request)  # a date is a value of its own (held below), not numbers and a name
        self._in_order = numbers_in_order(undated)
        marks = percent_marks(undated)
        self._fractions = {index: f"{float(number) / 100:.12g}"  # of the percentages, by their place in reading order
                           for index, (number, percent) in enumerate(zip(self._in_order, marks)) if percent}
        self._numbers = numbers(request) | set(self._fractions.values())
        self._arguments_are = arguments if arguments is not None else ArgumentKinds()
        self._dates = written_dates(request)
        self._true = asked_true(request, self._arguments_are.booleans)
        self._enum_values = asked_enums(request, self._arguments_are.choices())  # the enums' values it writes
        self._number_words = number_words(undated)  # the words around each number of ``_in_order``
        self._worded = worded_numbers(undated)  # the numbers written as words, with the words around each
        names = written_names(undated)
        numbered = asked_numbers(self._arguments_are.numbers, [*self._number_words, *(w for _, w in self._worded)])
        named = asked_names(undated, names, self._arguments_are.strings)
        self._asked = self._true | frozenset(self._enum_values) | numbered | named  # arguments to write
        self._number_lists = [Counter(listed) for listed in number_lists(undated)]  # a number as often as written
        self._list_starts = number_list_starts(undated)  # where in ``_in_order`` the list of each listed one begins
        self._array_start = 0  # where in ``_answer`` the last array opened
        self._next_number = 0  # where in ``_in_order`` the next number value is guessed to be
        self._numbers_of: dict[str, set[str]] = {}  # the number values written for each argument so far
        self._numbers_written: set[str] = set()  # the number values written so far
        self._amounts = amounts(undated)
        self._names = sorted(name[:_LOOK_AHEAD] for name in names)
        self._whole_names = {name.lower() for name in names}
        self._long_names = [_POSSESSIVE.sub("", name) for name in names if " " in name]  # of two words or more
        written = {word.lower() for word in _SCHEMA_WORD.findall(request)}
        self._schema_words = [tokens.token_of[word] for word in _SCHEMA_WORDS
                              if word not in written and word in tokens.token_of]
        self._listed = listed_names(undated, names)
        self._name_lists = name_lists(undated, names)
        self._closers = list(tokens.closers)
        self._empties, self._array_closers = list(tokens.empties), list(tokens.array_closers)
        self._object_closers = list(tokens.object_closers)
        self._number_enders = list(tokens.number_ends)
        self._bias = bias
        self._functions = functions  # the functions the request asks a call to each of
        self._json = JSONChars()
        self._string_is_value = False
        self._value = ""  # the string or number value written so far
        self._in_number = False
        self._answer = ""  # the calls written so far
        self._call_start = 0  # where in it the call being written starts
        self._key = ""  # the argument whose value is written next, or is being written
        self._inner_key = ""  # the key written last: an argument's, or one inside its value ("width" of ``area``)
        self._arguments: dict[str, str] = {}  # the arguments of the call being written so far (strings' values)
        self._last_call: dict[str, str] = {}  # and those of the call before it
        self._function = ""  # the function the call being written is to
        self._last_function = ""  # and the one the call before it was to
        self._copy = CallCopy()  # what the value being written would repeat of an earlier call
        # Whether the request asks for several things, in words or by listing names, or values of one enum
        # ("the last six months, the last year, and the last five years"): else a call repeated had best end
        # the answer.
        self._asks_for_several = (asks_for_several(request) or bool(self._name_lists)
                                  or any(len(values) > 1 for values in self._enum_values.values()))
        self._full_names = sorted(names)  # whole, as values a later call may take instead of a copy's
        self._names_after = {word: _names_after(request, word, names) for word in ("from", "to")}
        self._strings_of: dict[str, list[str]] = {}  # the string values written for each argument so far
        self._currencies = written_currencies(request)
        self._unwritten_codes = sorted({mention.code for mention in self._currencies}
                                       - set(re.findall(r"\b[A-Z]{3}\b", request)))  # named in words only
        # Where the request asks for each function, where it asks for several in parts of their own
        # (llmproxy.backends._function_regions), and where it writes each number and name.
        arguments_of = {name: self._arguments_are.orders.get(name, ()) for name in functions}
        self._regions = function_regions(request, arguments_of) if asks_for_several(request) else {}
        # the functions whose parts refer to what the request wrote before ("the same game", "in each city"):
        # those parts take another's values
        self._refers_back = {name for name, spans in self._regions.items()
                             if any(_BACK_REFERENCE.search(request[start:end]) for start, end in spans)}
        self._number_places = number_places(undated)
        self._name_places: dict[str, list[int]] = {}  # by a name's first characters, as ``_names`` holds them
        for name in names:
            self._name_places.setdefault(name[:_LOOK_AHEAD], []).extend(
                found.start() for found in re.finditer(re.escape(name), undated))

    def adjust(self, logits: np.ndarray) -> None:
        self._lower_empty_values(logits)
        self._lower_repeated_values(logits)
        self._lower_copied_call(logits)
        if self._in_number and len(self._json.open) >= _ARGUMENTS_DEPTH and self._number_is_whole():
            logits[self._number_enders] += self._bias  # the request's number, whole: 7, not 7012345678901234
        bias = self._bias
        in_value = self._json.in_string and self._string_is_value
        if ((in_value or self._item_ends()) and self._repeats_an_item()) or self._numbers_loop():
            self._end_array(logits, 2 * bias)  # a loop has begun: the array ends here
            return
        if in_value and self._functions and len(self._json.open) == _CALL_DEPTH:
            rests = [name[len(self._value):] for name in uncalled(self._functions, self._answer)
                     if name.startswith(self._value)]
            bias = 2 * self._bias
        elif in_value and (dates := self._dates_for_value()):
            if self._value in dates:
                logits[self._closers] += bias
                return
            rests = [date[len(self._value):] for date in dates if date.startswith(self._value)]
            if len(self._value) >= _SURE_DATE:
                bias = 2 * self._bias  # "2023-04-08", not "2023-04-8"
        elif in_value and (code := self._currency_code()) and code.startswith(self._value):
            if self._value == code:
                logits[self._closers] += bias
                return
            rests, bias = [code[len(self._value):]], 2 * self._bias  # "EUR" for "Euros": at the bias, "Euros"
        elif in_value and self._in_array() and self._holds_a_name_list(self._value):
            self._end_array(logits, bias)  # "C", "F", "G" of "a progression of C, F and G": whole
            return
        elif in_value and (values := self._enum_values.get(self._key)):
            if self._value in values:  # whole: it ends; in an array, so does the array where it holds them all
                if self._json.open[-1] != "[":
                    logits[self._closers] += bias
                elif self._array_holds(values, self._value):
                    self._end_array(logits, bias)
                else:
                    logits[self._closers_then(",")] += bias
                return
            self._lower_schema_words(logits)  # "string" for "major"
            fitting = [value for value in values if value.startswith(self._value)]
            before = self._answer[:len(self._answer) - len(self._value)]
            unused = [value for value in fitting if json.dumps(value) not in before]  # "aluminum" after "copper"
            going_on = self._list_going_on() if self._in_array() else frozenset()
            listed = [value for value in fitting if value.lower() in going_on]
            # in the order the request writes them: an array's items, as BFCL's keep them, and the calls' values
            # ("Barcelona and Manchester United in the UEFA Champions League and La Liga respectively")
            chosen = (unused or fitting)[:1]
            rests = [value[len(self._value):] for value in listed or chosen]
            if not self._value and not self._in_array():
                bias = 2 * self._bias  # at the bias, SmolLM2 wrote "restaurant_search" for "round-trip"
        elif in_value and (default := self._arguments_are.defaults.get((self._function, self._key))) \
                and default.startswith(self._value):
            if self._value == default:  # none of its choices asked for: its default ("Daily"), not "Monthly"
                logits[self._closers] += bias
                return
            self._lower_schema_words(logits)
            rests = [default[len(self._value):]]
        elif in_value and self._value.lower() in self._listed:
            logits[self._closers] += self._bias / 2
            return
        elif in_value and self._value and (items := self._items_begun()):
            if self._value.lower() in (item.lower() for item in items):
                logits[self._closers] += bias  # the list's next item, whole: "aluminum", a call each
                return
            rests = [item[len(self._value):] for item in items]
        elif in_value and self._value and len(self._value) < MIN_STRING:
            rests = [name[len(self._value):] for name in self._names if name.startswith(self._value)]
            bias = 3 * self._bias  # at twice, "Gabon" for "Galapagos Islands", "Taipei" for "Tokyo"
        elif in_value and len(self._value) >= MIN_STRING:
            found = list(re.finditer(re.escape(self._value), self._text))  # where the request writes it
            if self._key not in self._arguments_are.formatted and self._ends_a_part(self._value, found):
                logits[self._closers] += bias
                return
            rests = self._string_rests(found)
            if rests and all(rest[0].isalnum() and not _PLURAL_END.match(rest) for rest in rests):
                bias = 2 * self._bias  # inside a word: "Gala" of "Galapagos", where SmolLM2 went on to " Islands"
            if self._names_go_on() and (going := self._unused_name_rests()):
                rests = going  # "dataset2" after "dataset1", where the request writes both
            if longer := self._long_name_rests():
                rests, bias = longer, 2 * self._bias  # "Manchester" of "Manchester United": " United", not " City"
        elif in_value and not self._value:
            self._lower_schema_words(logits)
            self._lower_other_parts_names(logits)
            self._lower_currency_codes(logits)
            if directed := self._in_region(self._directed_names()):
                rests = directed[:1]  # "from Seattle to Boston": Seattle for the origin, where SmolLM2 wrote Boston
            elif self._names_go_on():
                rests = self._names_going_on()
            elif items := self._items_left():
                rests, bias = items[:1], 2 * self._bias  # at the bias, SmolLM2 copied the last call's item
            else:
                rests, bias = self._names_to_start(), self._bias / 2
        elif self._item_ends() and (held := self._list_in_array()):
            if held == "whole":  # it holds what the request lists for it
                self._end_array(logits, bias)
            else:
                logits[self._separators] += bias
            return
        elif self._writes_a_key() and (ahead := self._asked_ahead()):
            rests = [ahead[0][len(self._value):]] if ahead[0].startswith(self._value) else []
        elif self._in_number and self._value in self._worded_for_key():
            logits[self._number_enders] += bias  # "two adults": 2, not the 2023 of a date the request writes
            return
        elif self._in_number and not self._number_is_whole() and self._value == self._guess():
            logits[self._number_enders] += bias  # the next number in reading order, whole: "3 rooms", not 3000
            return
        elif self._in_number and not self._number_is_whole():
            rests = self._number_rests(self._value)
            if len(self._value.lstrip("-")) >= _SURE_DIGITS:
                bias = 2 * self._bias
        elif self._value_starts() and self._key in self._true and len(self._json.open) == _ARGUMENTS_DEPTH:
            rests = [" true", "true"]
        elif self._value_starts() and (worded := self._worded_for_key()):
            rests, bias = worded[:1], self._bias / 2
        elif self._value_starts() and self._guess():
            self._lower_other_parts_numbers(logits)
            place = self._guess_place()
            sure = (self._is_fraction(place) or self._stands_beside_key(place) or self._function == self._last_function
                    or (self._json.last == "[" and place in self._list_starts.values())  # an array's first, a list's
                    or self._last_of_part(place))
            rests, bias = [self._guess()], self._bias if sure else self._bias / 2
            if rests[0].startswith("-"):  # a digit first could be none of the request's negative numbers
                bias = 2 * self._bias
                spaced = self._token_of.get(" -")  # too: once a space is written, SmolLM2 holds to digits
                if spaced is not None and not self._answer[-1:].isspace():
                    logits[spaced] += bias
        elif self._argument_ends() and (self._last_call_went_on() or self._asked_ahead()):
            logits[self._separators] += bias
            logits[self._object_closers] -= bias  # the arguments' end: SmolLM2 closes them against the bias alone
            return
        elif self._argument_ends() and self._amounts - used_amounts(self._answer, self._amounts):
            logits[self._separators] += self._bias / 2
            return
        elif self._argument_ends() and self._only_unheld_ahead():
            logits[self._object_closers] += bias  # "compound_freq": 2 for "... rate of 2.5%": nobody asked
            logits[self._separators] -= bias
            return
        else:
            return
        along = self._tokens_along if in_value else self._tokens_starting
        raised = {token for rest in rests for token in along(rest)}
        if raised:
            logits[list(raised)] += bias

    def _lower_empty_values(self, logits: np.ndarray) -> None:
        """Lower an argument's value that would be empty: a string or array written whole in one token
        (' ""', ' []'), or a string's closing quote or an array's end as its first token. By the bias, by
        twice that for a required argument (the module's docstring says why)."""
        json = self._json
        penalty = 2 * self._bias if self._key in self._arguments_are.required else self._bias
        if self._value_starts():
            logits[self._empties] -= penalty
            if json.last == "[":
                logits[self._array_closers] -= penalty
        elif json.in_string and self._string_is_value and not self._value:
            logits[self._closers] -= penalty

    def _lower_repeated_values(self, logits: np.ndarray) -> None:
        """Lower, by the bias, the tokens by which a string value would go on as another of the call's argument
        values does (its end, where it is that value whole), unless the request writes that value twice; as
        the function's name does, from the value's start or from a word's; or as its argument's name does,
        where the request does not write that (the module's docstring says why)."""
        json = self._json
        if not (json.in_string and self._string_is_value and len(json.open) >= _ARGUMENTS_DEPTH):
            return
        held = {value for key, value in self._arguments.items() if key != self._key and len(value) >= MIN_STRING}
        written = self._value
        lowered: set[int] = set()
        for value in held:
            if value.startswith(written) and self._lowered_text.count(value.lower()) < 2:
                lowered.update(self._closers if value == written else self._tokens_starting(value[len(written):]))
        if self._function:  # its name, from the value's start or from a word's ("Louvre_Museum" + "_get_hours")
            for start in [0, *(i + 1 for i, char in enumerate(written) if char in _WORD_BREAKS)]:
                if (written[start:] or not start) and self._function.lower().startswith(written[start:].lower()):
                    lowered.update(self._tokens_starting(self._function[len(written) - start:]))
                    break
        key = self._key  # its own name, where the request does not write it: "detail" + "_level"
        if written and key.lower().replace("_", " ") not in self._lowered_text:
            before, joint, begun = written.rpartition("_")  # a word of its own after the value's, begun or not
            begins_key = key.lower().startswith(begun.lower())
            if key.lower().startswith(written.lower()):
                lowered.update(self._tokens_starting(key[len(written):]))
            elif written[-1:].isalnum() and not begins_key:  # "detailed" + "_detail_level"
                lowered.update(token for token in self._tokens_starting("_" + key) if len(self._pieces[token]) > 1)
            elif joint and before[-1:].isalnum() and begins_key:
                lowered.update(self._tokens_starting(key[len(begun):]))  # "detailed_" + "detail" + "_level"
        if lowered:
            logits[list(lowered)] -= self._bias

    def _lower_copied_call(self, logits: np.ndarray) -> None:
        """Lower, by twice the bias, the tokens by which the value being written would make its call an earlier
        one again (llmproxy.backends._call_copy), where they do not go on as another value the argument may take
        does (``_values_for_key``)."""
        if not self._asks_for_several:
            return
        written = self._copy.value()
        copies = [copy for copy in self._copy.copied() if copy[:1] in _COPIED_STARTS and copy.startswith(written)]
        others = [value for value in self._values_for_key() if value not in copies and _goes_on_as(written, value)]
        if not (copies and others):
            return  # nothing to repeat, or no other value to go on as
        lowered: set[int] = set()
        for copy in copies:
            rest = copy[len(written):]
            if not rest:  # a number, whole: its end would repeat it (a string closed is no other's start)
                lowered.update(self._number_enders)
                continue
            tokens = self._tokens_starting(rest) + (self._tokens_starting(" " + rest) if not written else [])
            if rest == '"':
                tokens += self._closers
            lowered.update(token for token in tokens
                           if not any(_goes_on_as(written + self._pieces[token], other) for other in others))
        if lowered:
            logits[list(lowered)] -= 2 * self._bias

    def _lower_other_parts_names(self, logits: np.ndarray) -> None:
        """Lower, by the bias, the first tokens of the names an earlier call's values hold that the request
        writes only outside the call's function's part, where that part holds names of its own: such a name
        is another call's ("Xbox" of the price search for the game update's platform, where SmolLM2 copied
        it), not where they go on as a name of the part ("New" of "New York" for "New Jersey"), and not where
        the part refers to what the request wrote before ("the same game", "in each city"). While a name of the
        part is in no value yet, every name written only outside it ("New York" for the turtles of "Galapagos
        Islands")."""
        inside = self._in_part_only(self._names)
        if not inside or self._function in self._refers_back:
            return
        written = self._answer.lower()
        if all(name.lower() in written for name in inside):
            earlier = self._answer[:self._call_start]
            outside = [name for name in self._names if name not in inside and json.dumps(name)[:-1] in earlier]
        else:
            outside = [name for name in self._names if name not in inside]
        self._lower_starts(logits, outside, inside)

    def _lower_other_parts_numbers(self, logits: np.ndarray) -> None:
        """The same for the request's numbers: lower, by the bias, the first tokens of those the request
        writes only outside the call's function's part, where that part holds numbers of its own: all of them
        while one of the part's is in no value yet ("the electric field at 3m", where SmolLM2 wrote the 25
        of the magnetic field's part), else those an earlier call's values hold ("from 0 to 3.1416" for the
        definite integral, where it wrote the "-2" and "2" of the Gaussian integral's part)."""
        region = self._region()
        if not region or self._function in self._refers_back:
            return
        inside = {number for place, number in enumerate(self._in_order) if self._in_part(place)}
        outside = [number for number in self._in_order if number not in inside]
        if not self._unheld_places(region):
            earlier = used_amounts(self._answer[:self._call_start], self._amounts)
            outside = [number for number in outside if earlier[f"{float(number):.12g}"] > 0]
        if inside:
            self._lower_starts(logits, outside, sorted(inside))

    def _lower_currency_codes(self, logits: np.ndarray) -> None:
        """Lower, by the bias, the codes of the currencies the request names in words as the start of another
        argument's value: "JPY" is a currency's ("5000 Japanese Yen"), not the unit of "15 kilometers"."""
        if self._unwritten_codes and not is_currency_argument(self._key):
            self._lower_starts(logits, self._unwritten_codes, ())

    def _lower_schema_words(self, logits: np.ndarray) -> None:
        """Lower the words of a schema ("string", "integer") as a string value's start, by twice the bias."""
        if not self._value:
            logits[self._schema_words] -= 2 * self._bias

    def _lower_starts(self, logits: np.ndarray, values: Sequence[str], kept: Sequence[str]) -> None:
        """Lower, by the bias, the tokens that begin one of ``values`` (after a space too, where none is written
        yet), but not those that begin one of ``kept`` too."""
        spaced = not self._answer[-1:].isspace() and not self._json.in_string
        starts = [*values, *(" " + value for value in values if spaced)]
        lowered = {token for value in starts for token in self._tokens_starting(value)
                   if not any(_goes_on_as(self._pieces[token], other) for other in kept)}
        if lowered:
            logits[list(lowered)] -= self._bias

    def _values_for_key(self) -> list[str]:
        """The values (as JSON text) the argument being written may take, as far as its schema and the request
        say: its enum's values, the request's numbers, or its names."""
        kinds, key = self._arguments_are, self._key
        if key in kinds.enums:
            return [json.dumps(value) for value in kinds.enums[key]]
        if key in kinds.numbers:
            return sorted(self._numbers)
        return [json.dumps(name) for name in self._full_names]

    def accept(self, token: int) -> None:
        self._copy.accept(self._pieces[token])
        start = len(self._answer)
        self._answer += self._pieces[token]
        for offset, char in enumerate(self._pieces[token]):
            starts = not self._json.in_string and self._json.value_starts()
            if self._json.step(char):
                self._value += char
            elif self._in_number and char in _NUMBER_CHARS:
                self._value += char
            elif char == '"' and self._json.in_string:  # a string opens
                self._number_ends()
                self._in_number, self._string_is_value, self._value = False, starts, ""
            else:
                if char == '"':  # a string closes
                    self._string_ends()
                self._number_ends()
                self._in_number = starts and char in "-0123456789"
                self._value = char
                if char == "[":
                    self._array_start = start + offset
                if char == "}" and not self._json.open:  # a call closes
                    self._last_call, self._arguments, self._call_start = self._arguments, {}, len(self._answer)
                    self._last_function, self._key = self._function, ""

    def _string_ends(self) -> None:
        """Where a string has just been written: an argument's key, or its value. The request's next numbers
        that a value writes in order are passed ("3x^2 + 2x - 1 at 5": the number after it is 5)."""
        if self._string_is_value:
            for number in numbers_in_order(self._value):
                if number == self._guess():
                    self._next_number = self._guess_place() + 1
        if len(self._json.open) == _CALL_DEPTH and self._string_is_value:
            self._function = self._value
        if not self._string_is_value and len(self._json.open) >= _ARGUMENTS_DEPTH:
            self._inner_key = self._value
        if len(self._json.open) != _ARGUMENTS_DEPTH:
            return
        if not self._string_is_value:
            self._key = self._value
        else:
            self._strings_of.setdefault(self._key, []).append(self._value)
        self._arguments[self._key] = self._value if self._string_is_value else ""

    def _dates_for_value(self) -> list[str]:
        """Where the value being written is an argument's that takes a date, and begins as one of the
        request's dates does as the argument writes them: those dates, the ones no call holds yet first
        (all, where every one is held); else none, and the value is held as any other string."""
        date_format = self._arguments_are.date_formats.get(self._key)
        if date_format is None or not self._dates or len(self._json.open) != _ARGUMENTS_DEPTH:
            return []
        dates = [date.strftime(date_format) for date in self._dates]
        fitting = [date for date in dates if date.startswith(self._value)]
        unused = [date for date in fitting if date not in self._answer[:len(self._answer) - len(self._value)]]
        return unused or fitting

    def _currency_code(self) -> str:
        """Where the value being written is an argument's that takes a currency (not from an enum), the code
        of the currency the request names for it (llmproxy.backends._currencies); else ""."""
        key = self._key
        if (not self._currencies or not is_currency_argument(key) or key in self._arguments_are.enums
                or len(self._json.open) != _ARGUMENTS_DEPTH):
            return ""
        held = [value for other, value in self._arguments.items() if other != key]
        return currency_for(key, self._currencies, self._strings_of.get(key, []), held)

    def _asked_ahead(self) -> list[str]:
        """The arguments of the call's function after the last one written that the request asks for
        (llmproxy.backends._asked_arguments) and the call has not given yet."""
        order = self._arguments_are.orders.get(self._function, ())
        after = order[order.index(self._key) + 1:] if self._key in order else order
        return [name for name in after if name in self._asked and name not in self._arguments]

    def _only_unheld_ahead(self) -> bool:
        """Whether the call's function has arguments after the last one written, and each is optional and one
        the request holds no value for: a number, where the call holds each of the request's numbers, or one
        with an enum (or choices its description quotes) none of whose values the request writes. Booleans
        and other strings are left to the model: the request may well hold theirs in other words."""
        kinds = self._arguments_are
        order = kinds.orders.get(self._function, ())
        if self._key not in order:
            return False
        after = [name for name in order[order.index(self._key) + 1:] if name not in self._arguments]
        numbers_left = self._amounts - used_amounts(self._answer[self._call_start:], self._amounts)
        return bool(after) and all(
            name not in kinds.required and name not in self._asked and name not in kinds.booleans
            and ((name in kinds.numbers and not numbers_left) or name in kinds.enums) for name in after)

    def _last_call_went_on(self) -> bool:
        """Whether the call before this one, to the same function, gave an argument this one has not yet."""
        return self._function == self._last_function and not self._last_call.keys() <= self._arguments.keys()

    def _long_name_rests(self) -> list[str]:
        """The rest of each name of two words or more that the request writes whose first word or words, whole,
        the string value written so far is (or all of it before its code: "Los Angeles" of "Los Angeles, CA")."""
        written = self._value
        return [name[len(written):] for name in self._long_names
                if name.startswith(written) and name[len(written):len(written) + 1] in (" ", ",")]

    def _unused_name_rests(self) -> list[str]:
        """The rest of each of the request's names that the string value written so far begins and no value
        of the answer holds yet (``_unused_names``)."""
        written = self._value
        return [name[len(written):] for name in self._names_going_on()
                if name.startswith(written) and len(name) > len(written)]

    def _names_going_on(self) -> list[str]:
        """The names the argument being written may go on to from the call before's (``_unused_names``), less
        those listed with another argument's value in that call: the best "Italian and Chinese" restaurants
        in Paris go on from Italian to Chinese, and stay in Paris."""
        others = {value.lower() for key, value in self._last_call.items() if key != self._key}
        taken = {name[:_LOOK_AHEAD] for listed in self._name_lists if listed & others for name in listed}
        return self._unused_names(self._answer, [name for name in self._names if name.lower() not in taken])

    def _directed_names(self) -> list[str]:
        """Where the argument being written names where something starts (``start_location``, ``_from``) or
        ends (``destination``), the names the request writes right after "from" or after "to", in reading
        order, those no call gave the argument yet first."""
        words = {word.lower() for word in _KEY_WORD.findall(self._key)}
        side = "from" if words & _ORIGIN_WORDS else "to" if words & _DESTINATION_WORDS else None
        if side is None:
            return []
        given = self._strings_of.get(self._key, [])
        names = self._names_after[side]
        return [name for name in names if name not in given] or names

    def _names_go_on(self) -> bool:
        """Whether the call before this one gave the argument being written one of the request's names."""
        return self._last_call.get(self._key, "").lower() in self._whole_names

    def _items_left(self) -> list[str]:
        """Where the call before this one, to the same function, gave the argument being written a value
        (not one of the request's names) that the request follows with items of a list: those of the items
        that no value written so far holds (llmproxy.backends._listed_items)."""
        before = self._last_call.get(self._key, "")
        if (not before or self._function != self._last_function or before.lower() in self._whole_names
                or len(self._json.open) != _ARGUMENTS_DEPTH):
            return []
        return items_left(self._text, before, _STRING.findall(self._answer))

    def _items_begun(self) -> list[str]:
        """The items of ``_items_left`` that the string value written so far begins (case aside)."""
        written = self._value.lower()
        return [item for item in self._items_left() if item.lower().startswith(written)]

    def _region(self) -> list[Span]:
        """The parts of the request where it asks for the function of the call being written (none where it
        asks for it in no part of its own)."""
        return self._regions.get(self._function, [])

    def _in_region(self, names: list[str]) -> list[str]:
        """Those of ``names`` (as ``_names`` holds them) that the request writes where it asks for the call's
        function, where any are; else all of them."""
        return self._in_part_only(names) or names

    def _in_part_only(self, names: list[str]) -> list[str]:
        """Those of ``names`` that the request writes where it asks for the call's function (none where it
        asks for it in no part of its own)."""
        region = self._region()
        return [name for name in names
                if any(in_regions(place, region) for place in self._name_places.get(name[:_LOOK_AHEAD], ()))]

    def _names_to_start(self) -> list[str]:
        """The names a string value may begin as: those that the call's text does not hold yet, of those the
        request writes where it asks for the call's function where any are (``_unused_names``)."""
        written = self._answer[self._call_start:].lower()
        nearby = [name for name in self._in_region(self._names) if name.lower() not in written]
        return nearby or self._unused_names(written)

    def _unused_names(self, written: str, names: Sequence[str] = ()) -> list[str]:
        """The request's names (their first characters; or those of them in ``names``, where any are) that the
        text ``written`` does not hold; all where it holds each."""
        written, names = written.lower(), names or self._names
        unused = [name for name in names if name.lower() not in written]
        return unused or list(names)

    def _number_ends(self) -> None:
        """Where a number value has just been written, the next is guessed to follow it in the request;
        not where it was not the guess and an earlier value was that number too: a value every call repeats
        ("both also rounded to 2") says nothing of where the answer is in the request."""
        if not self._in_number:
            return
        if self._value == self._guess():
            self._next_number = self._guess_place() + 1
        elif self._value in self._in_order and self._value not in self._numbers_written:
            later = [i for i, number in enumerate(self._in_order) if number == self._value and i >= self._next_number]
            self._next_number = (later[0] if later else self._in_order.index(self._value)) + 1
        self._numbers_written.add(self._value)
        self._numbers_of.setdefault(self._key, set()).add(self._value)

    def _guess(self) -> str:
        """The request's number the argument being written is guessed to take (``_guess_place``), as it
        takes it ("" where there is none)."""
        place = self._guess_place()
        if place >= len(self._in_order):
            return ""
        return self._fractions[place] if self._is_fraction(place) else self._in_order[place]

    def _is_fraction(self, place: int) -> bool:
        """Whether the request's number at ``place`` is a percentage the argument being written takes as the
        fraction it is."""
        return place in self._fractions and self._key not in self._arguments_are.whole_percentages

    def _stands_beside_key(self, place: int) -> bool:
        """Whether the request's number at ``place`` stands beside the words of the argument being written."""
        return place < len(self._number_words) and bool(self._number_words[place] & self._key_words())

    def _key_words(self) -> frozenset[str]:
        """The content words of the key whose value is being written: inside an argument's value that is an
        object, its own key's ("width" of ``"area": {"width": ...}``, not "area": SmolLM2 gave the width the
        "window area of 15 sq.ft." the request writes after the width and height)."""
        return content_words(self._inner_key if len(self._json.open) > _ARGUMENTS_DEPTH else self._key)

    def _worded_for_key(self) -> list[str]:
        """The numbers the request writes as words beside the words of the argument being written ("two
        adults" for ``no_of_adults``), where none it writes in digits stands beside them."""
        if any(self._stands_beside_key(place) for place in range(len(self._in_order))):
            return []
        key = self._key_words()
        return [digits for digits, words in self._worded if words & key]

    def _guess_place(self) -> int:
        """Where in the request's numbers the argument being written is guessed to find its value: the next
        number in reading order, unless it stands beside none of the argument's own words and another does:
        then the first of those that no call gave it yet ("5 years ago" for ``period_in_years``); past the
        last, the first that no value holds yet ("in 2015 ... the same for the year 2020": a later call's
        year, after 2020, is 2015), but not for an array's item: the model goes through a list of its own
        choosing there ("the data 7, 8, 9 ..." after "10 years" and "$200", written twice). An array goes
        through a list of the request's: its first item is the first of the list the number beside its words
        is in, a later one the list's next."""
        next_number = self._next_in_region()
        if self._stands_beside_key(next_number) or (
                self._in_array() and self._list_starts.get(next_number, next_number) != next_number):
            return next_number  # an array's later item goes on through the list it is in
        beside = [place for place in range(len(self._in_order)) if self._stands_beside_key(place)
                  and self._in_order[place] not in self._numbers_of.get(self._key, ()) and self._in_part(place)]
        if beside and self._json.last == "[":  # an array's first item: the list's first ("2nd, 3rd and 4th
            return self._list_starts.get(beside[0], beside[0])  # floors", not the 4 beside "floors")
        if beside or next_number < len(self._in_order) or self._in_array():  # an array's: its list's
            return beside[0] if beside else next_number
        return self._first_unheld()

    def _next_in_region(self) -> int:
        """``_next_number``, unless the request asks for the call's function in parts of its own and that
        place is in none: then the first number there that no value of the answer holds, where one is."""
        if self._in_part(self._next_number):
            return self._next_number
        return self._first_unheld(self._region())

    def _in_part(self, place: int) -> bool:
        """Whether the request's number at ``place`` is in the part where it asks for the call's function
        (any is, where it asks for it in no part of its own)."""
        region = self._region()
        return not region or (place < len(self._number_places) and in_regions(self._number_places[place], region))

    def _first_unheld(self, region: Sequence[Span] = ()) -> int:
        """The first place of the request's numbers (of those in ``region``, where given) that no value of the
        answer holds (a string's numbers count): the values hold a number the request writes several times in
        its first places ("7%" of "7%, and the data 7, 8, 7", once 0.07 is written); ``_next_number`` where
        each is held."""
        return next(iter(self._unheld_places(region)), self._next_number)

    def _unheld_places(self, region: Sequence[Span] = ()) -> list[int]:
        """The places of the request's numbers (of those in ``region``, where given) that no value of the
        answer holds, as ``_first_unheld`` counts them."""
        held = used_amounts(self._answer, self._amounts)
        places = []
        for place, number in enumerate(self._in_order):
            value = f"{float(number):.12g}"
            if held[value] > 0:
                held[value] -= 1
            elif not region or in_regions(self._number_places[place], region):
                places.append(place)
        return places

    def _last_of_part(self, place: int) -> bool:
        """Whether the request's number at ``place`` is the one number of the call's function's part that no
        value holds yet (where it asks for the function in a part of its own)."""
        region = self._region()
        return bool(region) and self._unheld_places(region) == [place]

    def _writes_a_key(self) -> bool:
        """Whether an argument's key is being written."""
        return self._json.in_string and not self._string_is_value and len(self._json.open) == _ARGUMENTS_DEPTH

    def _value_starts(self) -> bool:
        """Whether the next token starts an argument's value (or an item of one)."""
        json = self._json
        return not json.in_string and len(json.open) >= _ARGUMENTS_DEPTH and json.value_starts()

    def _number_is_whole(self) -> bool:
        """Whether the number being written is one the request writes, and none it writes goes on from it."""
        written = self._value
        return written in self._numbers and not any(
            number != written and number.startswith(written) for number in self._numbers)

    def _number_rests(self, written: str) -> list[str]:
        """What follows ``written`` in the request's next number in reading order, where it begins that one
        (1000 of "a principle of $1000 ... over 10 years" after "10": the 10 comes later); else in each
        number of the request it begins, where none ends with it."""
        guess = self._guess()
        if guess.startswith(written) and guess != written:
            return [guess[len(written):]]
        if written in self._numbers:
            return []
        return [number[len(written):] for number in self._numbers if number.startswith(written)]

    def _argument_ends(self) -> bool:
        """Whether an argument's value has just been written whole: next is the separator or the end of
        the arguments."""
        json = self._json
        return (not json.in_string and len(json.open) == _ARGUMENTS_DEPTH and json.open[-1] == "{"
                and json.last not in "{,:" and (not self._in_number or self._number_is_whole()))

    def _item_ends(self) -> bool:
        """Whether an item of an array has just been written whole: next is the separator or the array's end."""
        json = self._json
        return (not json.in_string and self._in_array()
                and json.last not in "[," and (not self._in_number or self._number_is_whole()))

    def _end_array(self, logits: np.ndarray, bias: float) -> None:
        """Raise the end of the array being written by ``bias`` and lower going on by as much: after its item,
        the array's closing bracket against the separator; inside a string item, the closing quote alone or
        with the bracket (``'"]'``) against the quote with the separator (``'",'``)."""
        if self._json.in_string:
            ends, goes_on = self._closers_then("]"), self._closers_then(",", bare=False)
        else:
            ends, goes_on = self._array_closers, self._separators
        logits[ends] += bias
        logits[goes_on] -= bias

    def _closers_then(self, after: str, *, bare: bool = True) -> list[int]:
        """The closers of a string that hold nothing after the closing quote but ``after`` (or nothing at all,
        where ``bare``)."""
        follows = ("", after) if bare else (after,)
        return [token for token in self._closers if self._pieces[token][1:].lstrip()[:1] in follows]

    def _repeats_an_item(self) -> bool:
        """Whether the string item being written (or the one just written, where the array's next token is
        to come) is an earlier one of its array, whole (case aside)."""
        json = self._json
        if not self._in_array():
            return False
        strings = [string.lower() for string in _STRING.findall(self._answer[self._array_start:])]
        if json.in_string and self._string_is_value:
            return self._value.lower() in strings
        return json.last == '"' and bool(strings) and strings[-1] in strings[:-1]

    def _numbers_loop(self) -> bool:
        """Whether the number just written in the array being written ends a run of two or more of its
        numbers written twice in a row ([0.6, 0.8, 0.6, 0.8])."""
        json = self._json
        if not self._in_number or json.in_string or not self._in_array():
            return False
        items = _NUMBER_ITEM.findall(self._answer[self._array_start:])
        return any(items[-2 * run:-run] == items[-run:] for run in range(2, len(items) // 2 + 1))

    def _in_array(self) -> bool:
        """Whether the value being written is an item of an array that is (or is in) an argument's value."""
        return self._json.open[-1:] == ["["] and len(self._json.open) > _ARGUMENTS_DEPTH

    def _holds_a_name_list(self, *more: str) -> bool:
        """Whether the strings of the array being written (and ``more``, about to be) are the names of a list
        the request writes (``name_lists``), all of them, case aside."""
        held = {string.lower() for string in (*_STRING.findall(self._answer[self._array_start:]), *more)}
        return held in self._name_lists

    def _list_going_on(self) -> frozenset[str]:
        """Where the array being written holds some of the names of a list the request writes, not all, the
        rest of them (of a list no array before holds whole, where one is: "parks with a Tennis Court and a
        Picnic Area ..., with a Tennis Court and a Playground", the third call's after "Tennis Court"); else
        none, lower-cased."""
        held = {string.lower() for string in _STRING.findall(self._answer[self._array_start:])}
        lists = [listed for listed in self._name_lists if held and held < listed]
        earlier = [{string.lower() for string in _STRING.findall(items)}
                   for items in _ARRAY.findall(self._answer[:self._array_start])]
        new = [listed for listed in lists if listed not in earlier]
        return frozenset().union(*(new or lists)) - held

    def _array_holds(self, values: Sequence[str], *more: str) -> bool:
        """Whether the strings of the array being written (and ``more``, about to be) hold every one of
        ``values``."""
        return set(values) <= set(_STRING.findall(self._answer[self._array_start:])) | set(more)

    def _list_in_array(self) -> str:
        """Whether the array being written holds what the request lists for it: "whole" where its items are
        all the enum values the request writes for the argument (``asked_enums``), all the names of a list the
        request writes (``name_lists``), or all the numbers of one (``number_lists``); "part" where not all of
        the enum's values or some of a list's numbers; else ""."""
        if self._holds_a_name_list():  # first: "a Tennis Court and a Picnic Area" of an enum's four, a call each
            return "whole"
        if values := self._enum_values.get(self._key):
            return "whole" if self._array_holds(values) else "part"
        items = amounts(self._answer[self._array_start:])
        lists = [listed for listed in self._number_lists if items and not items - listed]
        return "whole" if items in lists else "part" if lists else ""

    def _string_rests(self, found: Sequence[re.Match[str]]) -> list[str]:
        """What follows the value written in the request's text, where it is ``found`` there, where it nowhere
        ends a word or a quotation it begins."""
        rests = []
        for match in found:
            rest = self._text[match.end():match.end() + _LOOK_AHEAD]
            if not rest or not (rest[0].isalnum() or rest[0] in "-'"):
                return []  # the value may be whole as it is
            if match.start() and self._text[match.start() - 1] == rest[0]:
                return []  # a quotation's end: 'Stradivarius' is whole
            rests.append(rest)
        return rests

    def _ends_a_part(self, written: str, found: Sequence[re.Match[str]]) -> bool:
        """Whether the request writes ``written`` (where it is ``found``) right before a word that joins it to
        what follows ("the Natural History Museum in London") or at a sentence's end, and nowhere as the start
        of a quotation (a quoted title or message holds such words: 'Ticket to Ride')."""
        ends = (_JOINING_WORD,) if _ABBREVIATION.search(written) else (_JOINING_WORD, _SENTENCE_END)
        return (any(end.match(self._text, match.end()) for match in found for end in ends)
                and not any(match.start() and self._text[match.start() - 1] in _QUOTES for match in found))

    def _tokens_along(self, rest: str) -> list[int]:
        """The tokens whose text ``rest`` starts with that end where the model's tokenizer would end one, writing
        the string value so far and ``rest`` ("al" after "G" for "Galapagos", written "Gal" "apagos"; "ala" led
        SmolLM2 to "Gala Islands"); all of them where none does, or the tokenizer is not known."""
        tokens = self._tokens_starting(rest)
        if self._split is None:
            return tokens
        whole = self._value + rest
        if whole not in self._bounds:
            ends = np.cumsum([len(piece) for piece in self._split(whole)])
            self._bounds[whole] = frozenset(int(end) for end in ends)
        written = len(self._value)
        aligned = [token for token in tokens if written + len(self._pieces[token]) in self._bounds[whole]]
        return aligned or tokens

    def _tokens_starting(self, rest: str) -> list[int]:
        """The tokens whose text ``rest`` starts with."""
        return [token for end in range(1, len(rest) + 1) if (token := self._token_of.get(rest[:end])) is not None]
