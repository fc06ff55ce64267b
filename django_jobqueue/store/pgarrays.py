"""Array parameters of PostgreSQL's batched statements, as array literals in one text.

psycopg dumps a Python list element by element in Python (``ListDumper``): for the
completer's statements, 256 ids, 256 lease tokens and 256 hold intervals a flush, that
was about 9 µs per job, near a tenth of a no-op job's worker CPU. The same values
written as one array literal (``{1,2,3}``, ``{"a","b"}``) by ``str.join`` cost well
under 1 µs per job, and the statement casts the text (``%s::bigint[]``); its text does
not change, so it stays one prepared statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["bigint_array", "nulls_or_list", "text_array"]


def bigint_array(values: Sequence[int]) -> str:
    """``values`` (ints) as the text of a ``bigint[]`` literal, for ``%s::bigint[]``."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array(values: Sequence[str]) -> str | list[str]:
    """``values`` (strs) as the text of a ``text[]`` literal, for ``%s::text[]``.

    Each element is double-quoted (an empty string is ``""``, not a missing
    element). Where one holds a double quote or a backslash, which the literal
    would need escaped, the list itself is returned, for psycopg to dump: the lease
    tokens these statements carry are hex digits or empty, so that is never
    expected, only kept correct.
    """
    raw = "".join(values)
    if '"' in raw or "\\" in raw:
        return list(values)
    return '{"' + '","'.join(values) + '"}' if values else "{}"


def nulls_or_list(values: Sequence[Any]) -> str | list[Any]:
    """``values`` as an array parameter: the text ``{NULL,...}`` when every one is
    None (one per element, which any element type's cast reads), else the list."""
    if all(value is None for value in values):
        return "{" + ",".join(["NULL"] * len(values)) + "}"
    return list(values)
