"""Small helpers every stage may use, each a module of one concept:

    bounded_cache   least-recently-used caches bounded by bytes (keys are client text)
    json_bytes      compact JSON written and read by orjson, with the standard library's fallback
    json_cache      what is made from a client's JSON value, cached by the value's JSON bytes
    surrogates      lone UTF-16 surrogates in request text refused, naming where
    nesting         how deep a client's JSON may nest (200 levels), read and checked under that bound
    loops           an answer cut while going round in a loop, told from one with more to say

Import the modules themselves; this ``__init__`` stays empty so that importing one loads no other.
"""
