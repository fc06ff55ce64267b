"""The array literals of django_jobqueue/store/pgarrays.py, read back by PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_jobqueue.store.pgarrays import bigint_array, nulls_or_list, text_array

pytestmark = [pytest.mark.django_db, pytest.mark.vendor("postgresql")]


def _read(param: object, cast: str) -> list[object]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT %s::{cast}", [param])
        return cursor.fetchone()[0]


def test_ids_read_back_as_the_same_bigints() -> None:
    ids = [1, 2**62, 17, 9_000_000_000]
    assert _read(bigint_array(ids), "bigint[]") == ids
    assert _read(bigint_array([]), "bigint[]") == []


@pytest.mark.parametrize(
    "tokens",
    [
        ["0123abcd" * 4, "", "ffff"],
        [""],
        [],
        ["with,comma", "with}brace", "with space", "NULL", "with{brace"],
        ['a"quote', "back\\slash", "plain"],
    ],
)
def test_tokens_read_back_as_the_same_texts(tokens: list[str]) -> None:
    assert _read(text_array(tokens), "text[]") == tokens


def test_a_quote_or_backslash_leaves_the_list_to_the_driver() -> None:
    assert text_array(['a"b', "c"]) == ['a"b', "c"]
    assert isinstance(text_array(["ab", "cd"]), str)


def test_all_none_is_a_literal_of_nulls_and_any_value_keeps_the_list() -> None:
    assert _read(nulls_or_list([None, None, None]), "interval[]") == [None, None, None]
    mixed = [None, timedelta(seconds=5)]
    assert nulls_or_list(mixed) == mixed
    assert _read(nulls_or_list(mixed), "interval[]") == mixed
