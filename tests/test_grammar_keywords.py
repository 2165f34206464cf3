"""JSON-schema keywords in generated grammars, checked with llama.cpp's own grammar engine: every value
a schema admits is accepted, and where the grammar is exact every value it refuses is rejected (the
arithmetic, ``re`` or ``jsonschema`` being the truth). Where a grammar is only a superset, the test says
so and checks soundness (nothing valid rejected)."""

from __future__ import annotations

import ipaddress
import itertools
import json
import math
import random
import re
import time
import uuid
from pathlib import Path

import jsonschema
import pytest
from grammar_walk import accepts, sample

from llmproxy.errors import GrammarError
from llmproxy.evaluation import load_scenarios
from llmproxy.grammar import RuleSet, schema_grammar, validate_grammar
from llmproxy.syntaxes import create_syntax
from llmproxy.types import FunctionDefinition

SCENARIOS = Path(__file__).parent.parent / "scenarios" / "keywords.jsonl"


def grammar(schema: dict) -> str:
    text = schema_grammar(schema)
    validate_grammar(text)
    return text


def compact(value) -> str:
    return json.dumps(value, ensure_ascii=False)


# --- integer ranges ----------------------------------------------------------------------------


def _random_bounds(count: int) -> list[tuple[int | None, int | None]]:
    rng = random.Random(12)
    pairs = [(None, None), (0, None), (None, 0), (-1, 1), (0, 100), (5, 5), (0, 0), (-1000, -999), (1, 9),
             (10, 99), (-99, -10), (-7, None), (None, -7), (37, 1099), (-1111, 22), (-1200, 1200), (100, 1000)]
    while len(pairs) < count:
        low, high = sorted(rng.randint(-1300, 1300) for _ in range(2))
        pairs.append((None if rng.random() < 0.15 else low, None if rng.random() < 0.15 else high))
    return pairs


@pytest.mark.parametrize("low,high", _random_bounds(36))
def test_integer_ranges_are_exact(low, high):
    schema = {"type": "integer"}
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    text = grammar(schema)
    for n in range(-1200, 1201):
        assert accepts(text, str(n)) == ((low is None or n >= low) and (high is None or n <= high)), n
    for bound in (low, high):
        if bound is not None:  # the far side of each bound, beyond the window
            for n in (bound - 1, bound, bound + 1, bound * 10, bound * 10 + 1):
                assert accepts(text, str(n)) == ((low is None or n >= low) and (high is None or n <= high)), n
    for never in ("-0", "00", "007", "-01", "+5", "1.0", "1e2", "1 2", ""):
        assert not accepts(text, never), never


@pytest.mark.parametrize("schema,inside", [
    ({"exclusiveMinimum": -3, "exclusiveMaximum": 4}, lambda n: -3 < n < 4),
    ({"minimum": 2.5, "maximum": 7.9}, lambda n: 2.5 <= n <= 7.9),
    ({"exclusiveMinimum": 2.5, "exclusiveMaximum": 8.0}, lambda n: 2.5 < n < 8),
    ({"minimum": 3, "exclusiveMinimum": 3}, lambda n: n > 3),  # the stricter bound wins
    ({"minimum": 0, "maximum": 10, "exclusiveMaximum": 12}, lambda n: 0 <= n <= 10),
    ({"minimum": 3, "exclusiveMinimum": True, "maximum": 9, "exclusiveMaximum": True}, lambda n: 3 < n < 9),  # draft 4
    ({"minimum": -1e30}, lambda n: True),
    ({"maximum": 10**20}, lambda n: True),
])
def test_integer_bound_forms(schema, inside):
    text = grammar({"type": "integer", **schema})
    for n in range(-30, 31):
        assert accepts(text, str(n)) == inside(n), n


def test_integer_bounds_that_leave_nothing_are_an_error():
    for schema in ({"minimum": 5, "maximum": 4}, {"exclusiveMinimum": 4, "exclusiveMaximum": 5},
                   {"minimum": 1.2, "maximum": 1.8}):
        with pytest.raises(GrammarError, match="no integer"):
            schema_grammar({"type": "integer", **schema})
    with pytest.raises(GrammarError, match="must be a number"):
        schema_grammar({"type": "integer", "minimum": "3"})


def test_large_bounds_keep_their_digits():
    text = grammar({"type": "integer", "minimum": 10**18, "maximum": 10**18 + 5})
    assert accepts(text, str(10**18 + 3))
    assert not accepts(text, str(10**18 + 6)) and not accepts(text, str(10**17))


# --- number ranges -----------------------------------------------------------------------------


def _decimal_texts() -> list[str]:
    texts = []
    fractions = (None, "0", "00", "5", "25", "05", "999", "0001")
    for sign, whole, fraction in itertools.product(("", "-"), range(0, 12), fractions):
        text = f"{sign}{whole}" + ("" if fraction is None else f".{fraction}")
        if not (sign and float(text) == 0):  # "-0" is never written: 0 is
            texts.append(text)
    return texts


@pytest.mark.parametrize("schema", [
    {"minimum": 0, "maximum": 1}, {"exclusiveMinimum": 0, "maximum": 1}, {"minimum": -3, "exclusiveMaximum": 5},
    {"exclusiveMinimum": -10, "exclusiveMaximum": -2}, {"minimum": 7}, {"maximum": -4}, {"exclusiveMaximum": 0},
    {"exclusiveMinimum": 0}, {"minimum": 3, "maximum": 3}, {"minimum": -11, "maximum": 11},
])
def test_number_ranges_with_whole_bounds_are_exact(schema):
    text = grammar({"type": "number", **schema})
    for value_text in _decimal_texts():
        assert accepts(text, value_text) == jsonschema.Draft202012Validator({"type": "number", **schema}).is_valid(
            float(value_text)), value_text


@pytest.mark.parametrize("schema", [{"minimum": 0.5, "maximum": 2.25}, {"exclusiveMinimum": -1.5, "maximum": 3.75},
                                    {"minimum": -7.2, "exclusiveMaximum": -0.1}])
def test_number_ranges_with_fractional_bounds_bound_the_integer_part(schema):
    text = grammar({"type": "number", **schema})
    check = jsonschema.Draft202012Validator({"type": "number", **schema})
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    for value_text in _decimal_texts():
        value = float(value_text)
        if check.is_valid(value):
            assert accepts(text, value_text), value_text  # sound: nothing valid is refused
        if _integer_part_outside(value, low, high):
            assert not accepts(text, value_text), value_text  # and the integer part is ranged


def _integer_part_outside(value: float, low: float, high: float) -> bool:
    """Whether the integer part of ``value`` (of its magnitude, for negatives) is outside the bounds'."""
    if value >= 0:
        return high < 0 or value >= math.floor(high) + 1 or (low > 0 and value < math.floor(low))
    magnitude = -value
    return low >= 0 or magnitude >= math.floor(-low) + 1 or (high < 0 and magnitude < math.floor(-high))


def test_bounded_numbers_take_no_exponent_and_unbounded_ones_do():
    assert not accepts(grammar({"type": "number", "minimum": 0, "maximum": 10}), "1e1")
    assert accepts(grammar({"type": "number"}), "-2.5e-3")
    assert accepts(grammar({"type": "number", "minimum": 0}), "2.5E+3")
    assert not accepts(grammar({"type": "number", "minimum": 0}), "-1")
    with pytest.raises(GrammarError, match="no number"):
        schema_grammar({"type": "number", "exclusiveMinimum": 3, "maximum": 3})


# --- string lengths ----------------------------------------------------------------------------


@pytest.mark.parametrize("low,high", [(0, 0), (1, None), (3, 3), (2, 6), (0, 4), (5, None), (None, 1)])
def test_string_lengths_count_characters_not_escapes(low, high):
    schema = {"type": "string"}
    if low is not None:
        schema["minLength"] = low
    if high is not None:
        schema["maxLength"] = high
    text = grammar(schema)
    rng = random.Random(f"{low}-{high}")
    alphabet = ["a", "Z", " ", "é", "日", "\n", '"', "\\", "\t", "🎉"]
    for length in range(0, 9):
        for _ in range(3):
            value = "".join(rng.choice(alphabet) for _ in range(length))
            inside = (low is None or length >= low) and (high is None or length <= high)
            assert accepts(text, compact(value)) == inside, value


def test_long_lengths_are_loosened_not_expanded():
    text = grammar({"type": "string", "maxLength": 5000})
    assert accepts(text, compact("x" * 1500))
    text = grammar({"type": "string", "minLength": 3000})
    assert accepts(text, compact("y" * 1000))  # a superset: minLength above the cap is lowered to it
    assert not accepts(text, compact("y" * 999))
    with pytest.raises(GrammarError, match="maxLength < minLength"):
        schema_grammar({"type": "string", "minLength": 3, "maxLength": 2})


def test_length_bounded_strings_repeat_inside_arrays():
    text = grammar({"type": "array", "items": {"type": "string", "maxLength": 900}, "maxItems": 60})
    assert accepts(text, compact(["a" * 900, "b"]))
    assert not accepts(text, compact(["a" * 901]))


# --- patterns ------------------------------------------------------------------------------------

PATTERNS = [
    r"^[a-z]+$", r"^\d{3}-\d{4}$", r"abc", r"^ab", r"cd$", r"^(ab|c)*x?$", r"^(?:[A-Z][a-z]{1,3}){2}$", r"^a|b$",
    r"^[^a-c]{0,3}$", r"^\w+@\w+\.com$", r"^\s*$", r"^[\d.-]+$", r"^x{2,}$", r'^"q\\$', r"^(a|)$", r"^[a\-z]$",
    r"^\.\*\+$", r"colou?r", r"^(?<year>\d{4})-\d\d$", r"^.{2,4}$", r'^[^"\\]*$', r"^\x41\u00e9$", r"^a{0}b$",
    r"^a+?$", r"^[A-Z]{2}[0-9]{1,4}$", r"^(\d{1,3}\.){3}\d{1,3}$", r"^$", r"", r"^(a(b(c)?)?)+$", r"^\S\D\W$",
    r"^[\s\S]$", r"^{x}$", r"^a{2$", r"^[a-c]*(x|yz)[^\w\s]?$",
]
ALPHABET = list('abcxyzABZ019 -_."\\@.é\t') + ["com", "colour", "q"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_match_what_re_matches(pattern):
    text = grammar({"type": "string", "pattern": pattern})
    assert not text.startswith("root ::= ws string\n")  # translated, not left free
    python = pattern.replace("(?<", "(?P<")  # ECMA-262 named groups in Python's spelling
    rng = random.Random(pattern)
    literals = [ch for ch in pattern if ch.isalnum() or ch in "-.@ "]
    for _ in range(150):
        value = "".join(rng.choice(ALPHABET + literals) for _ in range(rng.randint(0, 7)))
        assert accepts(text, compact(value)) == (re.search(python, value, re.ASCII) is not None), value
    if pattern.startswith("^") and pattern.endswith("$") and pattern != r"^a|b$":  # wholly anchored: a random
        # walk could not be steered to an unanchored part
        for _ in range(8):  # what the grammar writes matches
            written = json.loads(sample(text, rng, pattern))
            assert re.search(python, written, re.ASCII), written


def test_pattern_characters_are_json_escaped():
    text = grammar({"type": "string", "pattern": r'^a"b\\c\nd$'})
    assert accepts(text, compact('a"b\\c\nd'))  # "a\"b\\c\nd"
    assert not accepts(text, '"a"b\\c\nd"') and not accepts(text, '"a\\"b\\c\\nd"')


@pytest.mark.parametrize("pattern", [r"(a)\1", r"^(?=a)", r"\bfoo", r"a(^b)", r"(?i)abc", r"\p{L}", r"a{,3}", r"[]a]",
                                     r"a*+", r"^(?!x).*$", r"[\d-z]", "x" * 1001])
def test_patterns_without_a_grammar_leave_the_string_free(pattern):
    text = grammar({"type": "string", "pattern": pattern})
    assert accepts(text, compact("anything at all"))


@pytest.mark.parametrize("pattern", ["(", "a)", "a**", "[z-a]", "[ab", "a\\", "x{3,1}", "*a", "a|?", "^*"])
def test_malformed_patterns_are_an_error_naming_them(pattern):
    with pytest.raises(GrammarError, match="not a valid regular expression") as info:
        schema_grammar({"type": "string", "pattern": pattern})
    assert repr(pattern) in str(info.value)
    with pytest.raises(GrammarError):  # even where a format shapes the string
        schema_grammar({"type": "string", "format": "date", "pattern": pattern})


def test_nested_pattern_repetitions_stay_within_llama_cpp_limits():
    text = grammar({"type": "string", "pattern": r"^((ab){1,100}c){1,50}$"})
    assert accepts(text, compact("ababc" * 3)) and not accepts(text, compact("c"))


# --- formats -------------------------------------------------------------------------------------

FORMATS = {
    "date": (["2024-02-29", "1999-12-31", "0001-01-01"],
             ["2024-13-01", "2024-1-01", "24-01-01", "2024-01-32", "2024-00-10"]),
    "time": (["23:59:60Z", "12:00:00+02:00", "00:00:00.123z", "08:30:00-11:30"],
             ["24:00:00Z", "12:00:00", "12:00Z", "12:60:00Z", "12:00:00+2:00"]),
    "date-time": (["2024-05-06T07:08:09Z", "2024-05-06t07:08:09.5-01:30"],
                  ["2024-05-06 07:08:09", "2024-05-06T07:08Z", "2024-05-06"]),
    "uuid": (["3f2b8c1e-7d4a-4e5f-9a6b-1c2d3e4f5a6b", "3F2B8C1E-7D4A-4E5F-9A6B-1C2D3E4F5A6B"],
             ["3f2b8c1e7d4a4e5f9a6b1c2d3e4f5a6b", "3f2b8c1e-7d4a-4e5f-9a6b-1c2d3e4f5a6g",
              "{3f2b8c1e-7d4a-4e5f-9a6b-1c2d3e4f5a6b}"]),
    "email": (["a.b+c@example.co.uk", "x@y.zz", "o'neil_{x}@mail-1.example.org"],
              ["a@b", "@b.c", "a..b@c.d", "a@-b.c", "a@b-.c", "a b@c.d", "a@b..c"]),
    "ipv4": (["0.0.0.0", "255.255.255.255", "192.168.1.10"],
             ["256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1.2.3.-4"]),
}


def _looks_right(form: str, value: str) -> bool:
    date = r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    time_ = r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
    if form == "uuid":
        return str(uuid.UUID(value)) == value.lower()
    if form == "ipv4":
        return str(ipaddress.IPv4Address(value)) == value
    if form == "email":
        label = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
        return re.fullmatch(rf"[^@\s.]+(\.[^@\s.]+)*@{label}(\.{label})+", value) is not None
    return re.fullmatch({"date": date, "time": time_, "date-time": f"{date}[Tt]{time_}"}[form], value) is not None


@pytest.mark.parametrize("form", FORMATS)
def test_formats(form):
    text = grammar({"type": "string", "format": form})
    good, bad = FORMATS[form]
    for value in good:
        assert accepts(text, compact(value)), value
    for value in bad:
        assert not accepts(text, compact(value)), value
    rng = random.Random(form)
    for _ in range(10):
        written = json.loads(sample(text, rng, "TtZz:-+.@"))
        assert _looks_right(form, written), written


def test_unknown_formats_leave_the_string_free():
    assert accepts(grammar({"type": "string", "format": "hostname"}), compact("not a host name!"))


# --- arrays --------------------------------------------------------------------------------------

ELEMENTS = [1, "s", True]


def _arrays(longest: int):
    for length in range(longest + 1):
        yield from (list(items) for items in itertools.product(ELEMENTS, repeat=length))


@pytest.mark.parametrize("schema", [
    {"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": {"type": "boolean"}},
    {"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"prefixItems": [{"type": "integer"}, {"type": "string"}]},
    {"prefixItems": [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}], "items": False, "minItems": 2},
    {"prefixItems": [{"type": "integer"}], "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
    {"prefixItems": [{"type": "integer"}, {"type": "string"}, {"type": "integer"}], "maxItems": 2},
    {"items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    {"items": {"enum": [1, "s"]}, "minItems": 2},
    {"items": {"type": "boolean"}, "maxItems": 0},
    {"items": False},
])
def test_arrays_admit_exactly_the_valid_ones(schema):
    schema = {"type": "array", **schema}
    text = grammar(schema)
    check = jsonschema.Draft202012Validator(schema)
    for value in _arrays(4):
        assert accepts(text, compact(value)) == check.is_valid(value), value


def test_the_tuple_form_of_items():
    schema = {"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False}
    text = grammar(schema)
    check = jsonschema.Draft7Validator(schema)
    for value in _arrays(3):
        assert accepts(text, compact(value)) == check.is_valid(value), value


def test_unsatisfiable_array_counts_are_an_error():
    with pytest.raises(GrammarError, match="maxItems < minItems"):
        schema_grammar({"type": "array", "minItems": 3, "maxItems": 1})
    with pytest.raises(GrammarError, match="at least 3"):
        schema_grammar({"type": "array", "prefixItems": [{}, {}], "items": False, "minItems": 3})


# --- objects -------------------------------------------------------------------------------------

PROPS = {key: {"type": "integer"} for key in "abcde"}


def _ordered_subsets():
    keys = list(PROPS)
    for size in range(len(keys) + 1):
        for chosen in itertools.combinations(keys, size):
            yield {key: i for i, key in enumerate(chosen)}


@pytest.mark.parametrize("extra", [
    {}, {"required": ["c"]}, {"required": ["a", "e"]}, {"minProperties": 1}, {"minProperties": 3, "required": ["b"]},
    {"maxProperties": 2}, {"minProperties": 2, "maxProperties": 3}, {"maxProperties": 2, "required": ["d"]},
    {"minProperties": 5}, {"minProperties": 9}, {"maxProperties": 0},
])
def test_objects_admit_exactly_the_valid_ordered_subsets(extra):
    schema = {"type": "object", "properties": PROPS, "additionalProperties": False, **extra}
    text = grammar(schema)
    check = jsonschema.Draft202012Validator({**schema, "minProperties": min(schema.get("minProperties", 0), 5)})
    for value in _ordered_subsets():
        assert accepts(text, compact(value)) == check.is_valid(value), value
    assert not accepts(text, '{"b": 1, "a": 2}') and not accepts(text, '{"a": 1, "a": 2}')
    assert not accepts(text, '{"a": 1,}') and not accepts(text, '{, "a": 1}')


def test_max_properties_below_the_required_ones_is_an_error():
    with pytest.raises(GrammarError, match="maxProperties"):
        schema_grammar({"type": "object", "properties": PROPS, "required": ["a", "b"], "maxProperties": 1})


def test_free_members_are_counted():
    text = grammar({"type": "object", "additionalProperties": {"type": "integer"},
                    "minProperties": 1, "maxProperties": 2})
    cases = [({}, False), ({"x": 1}, True), ({"x": 1, "y": 2}, True), ({"x": 1, "y": 2, "z": 3}, False),
             ({"x": "s"}, False)]
    for value, ok in cases:
        assert accepts(text, compact(value)) == ok, value
    assert accepts(grammar({"type": "object", "minProperties": 1}), compact({"k": [None]}))
    assert not accepts(grammar({"type": "object", "minProperties": 1}), "{}")


def test_enum_and_const_of_any_json_value():
    values = [{"tier": "team", "seats": 10}, [1, "x", None], None, 2.5, "s", {"deep": {"a": []}}]
    text = grammar({"enum": values})
    for value in values:
        assert accepts(text, json.dumps(value, separators=(",", ":")))
    for other in ({"tier": "team", "seats": 11}, [1, "x"], 2.50001, "t", {}):
        assert not accepts(text, json.dumps(other, separators=(",", ":")))
    assert accepts(grammar({"const": {"a": [1, {"b": None}]}}), '{"a":[1,{"b":null}]}')
    with pytest.raises(GrammarError, match="not a JSON value"):
        schema_grammar({"const": float("nan")})


def test_many_optional_properties_make_a_linear_grammar():
    def build(n: int) -> tuple[float, str]:
        schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}
        start = time.perf_counter()
        text = schema_grammar(schema)
        return time.perf_counter() - start, text

    seconds, text = build(3000)
    assert seconds < 1.0, seconds
    assert len(text.encode()) < 250 * 3000, len(text.encode())
    validate_grammar(text)  # within llama.cpp's and llmproxy.grammar.limits' bounds (rule chains above all)
    assert accepts(text, compact({"p7": 1, "p1500": 2, "p2999": 3})) and accepts(text, "{}")
    assert not accepts(text, compact({"p1500": 2, "p7": 1}))
    assert len(build(2000)[1]) < 2.2 * len(build(1000)[1])


@pytest.mark.parametrize("required", [[], ["p0"], ["p17", "p30"], ["p39"], ["p15", "p16"]])
def test_many_optional_properties_keep_their_order(required):
    n = 40  # more than one level of the tree of optional members
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}, "required": required}
    text = grammar(schema)
    check = jsonschema.Draft202012Validator(schema)
    rng = random.Random(str(required))
    subsets = [[], list(range(n)), *([i] for i in range(n))]
    subsets += [sorted(rng.sample(range(n), rng.randint(2, 12))) for _ in range(60)]
    for keys in subsets:
        doc = {f"p{i}": i for i in keys}
        assert accepts(text, compact(doc)) == check.is_valid(doc), keys
        if len(doc) > 1:
            assert not accepts(text, compact(dict(reversed(list(doc.items()))))), keys
    for _ in range(10):
        written = json.loads(sample(text, rng, "p0123456789"))
        check.validate(written)
        assert list(written) == sorted(written, key=lambda key: int(key[1:]))


def test_counts_are_dropped_for_large_objects():
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(100)}, "minProperties": 1}
    assert accepts(grammar(schema), "{}")  # a superset: the validation checks the count


def test_counts_after_a_forced_first_member():
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abc"},
              "minProperties": 1, "maxProperties": 2}
    rules = RuleSet()
    text = rules.render(rules.object(schema, "f", 1, schema, first=("inner_thoughts", "string")))
    validate_grammar(text)
    for keys in ("", "a", "b", "c", "ab", "ac", "bc", "abc"):
        doc = {"inner_thoughts": "hm", **{key: 1 for key in keys}}
        assert accepts(text, compact(doc)) == (1 <= len(keys) <= 2), keys


# --- through the call grammars -------------------------------------------------------------------

LEVEL = FunctionDefinition(name="set_level", parameters={
    "type": "object", "required": ["level"],
    "properties": {"level": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"type": "null"}]}}})


@pytest.mark.parametrize("name", ["json", "hermes", "memgpt"])
def test_call_grammars_hold_the_range(name):
    syntax = create_syntax(name, {"inner_thoughts": "none", "prime": "open"} if name == "memgpt" else {}, "test")
    shape = syntax.shape("required", [LEVEL], ["set_level"], named=False, parallel=False, first_message=False,
                         primed=True)
    text = syntax.grammar(shape).text
    validate_grammar(text)
    rng = random.Random(name)
    for _ in range(12):
        answer = syntax.parse(sample(text, rng, "set_level"), shape)
        jsonschema.validate(answer.calls[0].arguments, LEVEL.parameters)
    if name == "json":
        cases = [(0, True), (42, True), (100, True), (None, True), (101, False), (-1, False), (2038916745, False)]
        for level, ok in cases:
            assert accepts(text, compact({"name": "set_level", "arguments": {"level": level}})) == ok, level


# --- the scenario suite --------------------------------------------------------------------------


def test_keyword_scenarios_load_and_their_tools_build_grammars():
    scenarios = load_scenarios(SCENARIOS)
    assert len(scenarios) >= 8
    for scenario in scenarios:
        for tool in scenario.request.tools:
            grammar(tool.function.parameters)
