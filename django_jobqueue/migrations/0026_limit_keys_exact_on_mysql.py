"""Limit keys compare exactly on MySQL and MariaDB, as on PostgreSQL and SQLite.

A flow-control limit with a partition counts and locks per key (docs/limits.md). The
keys live in ``Job.limit_key`` and ``LimitState.limit_key``, which MySQL and MariaDB
made with the database's default collation, case-insensitive and padding trailing
spaces (``utf8mb4_general_ci`` and the like): ``"Cust"``, ``"cust"`` and ``"cust "``
were one key there, sharing one slot and one state row, while the claim's Python told
them apart. Both columns now take the binary collation of their character set that
does not pad (MariaDB's ``<charset>_nopad_bin``, MySQL 8's ``utf8mb4_0900_bin``; else
``<charset>_bin``), so every database has the same keys.

MySQL and MariaDB rebuild each table for the change (InnoDB copies the rows, holding
writes to the table meanwhile): on a large job table, run it at a quiet time. Other
databases are untouched.
"""

from typing import Any

from django.db import migrations

#: (model, column, NOT NULL DEFAULT '' kept by the column's new definition).
COLUMNS = (("Job", "limit_key", True), ("LimitState", "limit_key", False))


def _column(schema_editor: Any, table: str, column: str) -> tuple[str, str, int]:
    """The character set, collation and length of MySQL's ``table``.``column``."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME, CHARACTER_MAXIMUM_LENGTH "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s AND COLUMN_NAME = %s",
            [table, column],
        )
        charset, collation, length = cursor.fetchone()
    return charset, collation, int(length)


def _binary(schema_editor: Any, charset: str) -> str:
    """The exact collation of ``charset``: without padding when the server has one."""
    with schema_editor.connection.cursor() as cursor:
        for name in (f"{charset}_nopad_bin", f"{charset}_0900_bin", f"{charset}_bin"):
            cursor.execute(
                "SELECT 1 FROM information_schema.COLLATIONS WHERE COLLATION_NAME = %s", [name]
            )
            if cursor.fetchone():
                return name
    return f"{charset}_bin"


def _table_collation(schema_editor: Any, table: str) -> str:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT TABLE_COLLATION FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            [table],
        )
        return str(cursor.fetchone()[0])


def _alter(apps: Any, schema_editor: Any, *, exact: bool) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    quote = schema_editor.quote_name
    for model, column, has_default in COLUMNS:
        table = apps.get_model("django_jobqueue", model)._meta.db_table
        charset, collation, length = _column(schema_editor, table, column)
        wanted = (
            _binary(schema_editor, charset) if exact else _table_collation(schema_editor, table)
        )
        if collation == wanted:
            continue
        default = " DEFAULT ''" if has_default else ""
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} MODIFY {quote(column)} VARCHAR({length}) "
            f"CHARACTER SET {charset} COLLATE {wanted} NOT NULL{default}"
        )


def exact(apps: Any, schema_editor: Any) -> None:
    _alter(apps, schema_editor, exact=True)


def as_table(apps: Any, schema_editor: Any) -> None:
    _alter(apps, schema_editor, exact=False)


class Migration(migrations.Migration):
    atomic = False  # MySQL's DDL commits on its own: no transaction around it

    dependencies = [
        ("django_jobqueue", "0025_list_indexes_other_vendors"),
    ]

    operations = [migrations.RunPython(exact, as_table, elidable=False)]
