"""1 MB hostile inputs for the JSON repair: each must return or fail quickly (linear time, no
recursion). Shared by tests/test_repair.py and bench/bench_repair.py."""

MB = 1_000_000
HOSTILE = {
    "nested arrays": '{"a": ' + "[" * 500_000,
    "bare nested arrays": "[" * MB,
    "nested objects": "{" * 500_000,
    "repeated key prefix": '{"a":' * 200_000,
    "valid deep nesting": '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "unbalanced quotes": '{"a": "' + '"x' * 500_000,
    "only quotes": '{"a": "' + '"' * MB,
    "quote space": '{"a": "' + '" ' * 500_000,
    "quote newline": '{"a": "' + '"\n' * 500_000,
    "comma quote": '{"a": "' + '",' * 500_000,
    "backslashes": '{"a": "' + "\\" * MB,
    "flat array": '{"a": [' + "1, " * 330_000,
    "flat object": "{" + '"k": "v", ' * 100_000,
    "flat bad escapes": "{" + '"k": "\\_", ' * 100_000,
    "comments": "{" + "/* c */ " * 125_000,
    "line comments": '{"a": 1,' + "//\n" * 330_000,
    "bare words": '{"a": ' + "w, " * 330_000,
    "bare keys": "{" + "k: v, " * 160_000,
    "junk keys": "{" + "x y " * 250_000,
    "think openers": "<think>" * 140_000 + "{",
    "think closers": "</think>{" * 100_000,
    "fences": "```" * 330_000 + "{",
    "special tokens": '{"a": "' + "<|x" * 330_000,
    "braces in prose": "{I think} " * 100_000,
    "no brace": "x" * MB,
    "escaped json": '{\\"a\\": \\"' + "x" * MB,
    "string of json": '"{' + '\\"' * 500_000,
}
