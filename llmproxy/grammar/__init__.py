"""The grammar stage: takes JSON schemas (a request's tool schemas, ``response_format``) or the name
of a static ``.gbnf`` file, gives GBNF text that llama.cpp's own parser has accepted.

* ``_schema`` (RuleSet): what each schema keyword becomes, with one module per keyword family:
  ``_strings`` (``_formats``, ``_regex`` over ``_charsets``), ``_ranges``, ``_lists``, ``_members``
  (which see the rule set through ``_rules.Rules``, so none imports ``_schema``);
  the call syntaxes (llmproxy/syntaxes/) build their call grammars on the same rules;
* ``_files``: the static grammars in grammars/ (built-in and the user's);
* ``limits``: bounds on grammar text, checked before llama.cpp parses it; ``_validation``: the parse;
* ``patterns``: a schema's ``pattern`` keywords matched in linear time (RE2), for validation.
"""

from llmproxy.errors import GrammarError
from llmproxy.grammar._files import grammar_files, grammar_names, load_grammar
from llmproxy.grammar._members import members
from llmproxy.grammar._regex import (
    MAX_NESTING as MAX_PATTERN_NESTING,
    MAX_PATTERN_LENGTH,
    translate as translate_pattern,
)
from llmproxy.grammar._schema import RuleSet, gbnf_literal, json_literal, key_value, schema_grammar
from llmproxy.grammar._validation import prepare_validation, validate_grammar
from llmproxy.grammar.limits import GRAMMAR_LIMITS, GrammarLimits, GrammarSize, check_grammar_limits
from llmproxy.grammar.patterns import check_patterns, compiled, linear_validator

__all__ = [
    "GRAMMAR_LIMITS",
    "MAX_PATTERN_LENGTH",
    "MAX_PATTERN_NESTING",
    "GrammarError",
    "GrammarLimits",
    "GrammarSize",
    "RuleSet",
    "check_grammar_limits",
    "check_patterns",
    "compiled",
    "gbnf_literal",
    "grammar_files",
    "grammar_names",
    "json_literal",
    "key_value",
    "linear_validator",
    "load_grammar",
    "members",
    "prepare_validation",
    "schema_grammar",
    "translate_pattern",
    "validate_grammar",
]
