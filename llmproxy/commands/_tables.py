"""Markdown tables for the commands' results: never wrapped, so a run pastes whole into a README or an issue."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """``rows`` under ``header``, each column padded to its widest cell; ``right``: the columns aligned
    right (numbers)."""
    widths = [max(map(len, column)) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(
            cell.rjust(width) if align else cell.ljust(width) for cell, width, align in zip(cells, widths, right)
        ) + " |"

    rule = "|" + "|".join("-" * (width + 1) + (":" if align else "-") for width, align in zip(widths, right)) + "|"
    return "\n".join([line(header), rule, *map(line, rows)])
