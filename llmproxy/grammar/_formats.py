"""String ``format`` values as GBNF for the JSON text inside the quotes.

* ``date``, ``time``, ``date-time``: RFC 3339 (``full-date``, ``full-time``, ``date-time``): the time
  needs its offset (``Z`` or ``+02:00``), as the RFC and JSON Schema say; months and days are ranged
  (``02-31`` gets through: calendars are left to the validation), a leap second ``:60`` is admitted.
* ``uuid``: 8-4-4-4-12 hex digits, either case.
* ``email``: a reasonable shape, not RFC 5321 in full: a dot-atom local part (no quoted local parts),
  ``@``, and a domain of at least two dot-separated labels (no address literals such as ``[1.2.3.4]``).
* ``ipv4``: four decimal octets 0-255 without leading zeros.

Other formats are not expressed: the string stays free and the validation checks it.
"""

from __future__ import annotations

from llmproxy.grammar._ranges import natural_range

_DATE = '[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )'
_TIME = (
    '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" ( [0-5] [0-9] | "60" ) ( "." [0-9]{1,9} )?'
    ' ( [Zz] | [+\\x2D] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'
)
_HEX = "[0-9a-fA-F]"
# RFC 5322 atext; in a GBNF class '-' and '^' are written as hex escapes.
_ATEXT = "[A-Za-z0-9!#$%&'*+/=?\\x5E_`{|}~\\x2D]"
_LABEL = "[A-Za-z0-9] ( [A-Za-z0-9\\x2D]* [A-Za-z0-9] )?"
_OCTET = f"( {natural_range(0, 255)} )"

FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE} [Tt] {_TIME}",
    "uuid": f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}',
    "email": f'{_ATEXT}+ ( "." {_ATEXT}+ )* "@" {_LABEL} ( "." {_LABEL} )+',
    "ipv4": f'{_OCTET} "." {_OCTET} "." {_OCTET} "." {_OCTET}',
}
