"""Whether a request says it asks for several things: a call each, where tools are offered.

Read by ``choose`` (llmproxy.decide: such a request leans to a call) and by what follows a chosen call
(llmproxy.backends._list_continuation: whether more calls follow; llmproxy.backends._value_grounding: which
part of the request each call's values come from).
"""

from __future__ import annotations

import re

# Words with which a request asks for several things, and clauses that begin another task ("Additionally,
# ...", ". And find ...", "... and book a hotel"): on BFCL's non-live requests, in 329 of the 400 that ask for
# several calls and 51 of the 600 that ask for one (the words alone: 314 and 51). Not "vs": it is a name's
# ("the R vs Adams legal case") in the 3 that write no other such word, which ask for one call or none.
_ASKS_FOR_SEVERAL = re.compile(
    r"\b(?:respectively|each|both|then|also|repeat|same|again|as well|another|second|third|two|three|four|"
    r"several|different|multiple|compare|comparison|individually|separately|"
    r"additionally|in addition|firstly|secondly|lastly|finally|furthermore|moreover|afterwards?|after that)\b"
    r"|(?:^|[.?!]\s+)(?:and|first|next)\b"
    r"|\band (?:then )?(?:find|book|calculate|compute|get|make|generate|create|translate|convert|identify|"
    r"analy[sz]e|display|locate|give|tell|show|search|fetch|estimate|predict|determine|check|list|plan|buy|"
    r"send|retrieve|provide)\b", re.IGNORECASE)


def asks_for_several(request: str) -> bool:
    """Whether a request says it asks for several things ("respectively", "then", "also" ...: ``_ASKS_FOR_SEVERAL``)."""
    return _ASKS_FOR_SEVERAL.search(request) is not None
