"""The repair stage: takes the raw text a model wrote where JSON was due (cut off, wrapped in prose or
fences, Python-flavoured, unquoted), gives the JSON value it meant and the names of the repairs that
fired, or raises ``JSONRepairError`` where a fix would mean inventing a value.

``_repairer`` holds the entry points and the list of repairs; ``_json_scan`` the single-pass scanner
behind them.
"""

from llmproxy.repair._repairer import (
    MAX_DEPTH,
    MAX_VALUES,
    Repaired,
    RepairedMany,
    repair,
    repair_all,
    repair_json,
    repair_value,
)

__all__ = ["MAX_DEPTH", "MAX_VALUES", "Repaired", "RepairedMany", "repair", "repair_all", "repair_json", "repair_value"]
