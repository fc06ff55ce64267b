"""Checks of what a caller hands in: text, queue names, JSON payloads, delays, integers.

Every check returns its value when every database (PostgreSQL, MariaDB, SQLite)
stores it the same way, else raises the typed error of :mod:`.exceptions` whose
message says what to change. Nothing here touches the database.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from .durations import parse_duration
from .exceptions import (
    InvalidJobId,
    InvalidOption,
    InvalidPayload,
    InvalidRequest,
    PayloadTooLarge,
)

__all__ = [
    "check_batch",
    "MAX_DELAY",
    "MAX_ID_BYTES",
    "MAX_INT",
    "MAX_JSON_DEPTH",
    "check_delay",
    "check_json",
    "json_text",
    "check_positive_int",
    "check_result_size",
    "json_size",
    "check_queue",
    "QUEUE_NAME_RULE",
    "queue_name_problem",
    "check_text",
    "hold_hash",
    "text_problem",
]

#: Longest id (docs/design.md#ids) and unique key, in bytes of UTF-8.
MAX_ID_BYTES = 1024
#: Deepest nesting of lists and objects in a payload or result: MariaDB's JSON
#: columns refuse documents nested deeper than 31.
MAX_JSON_DEPTH = 31
#: Longest ``delay``: now plus it must stay a date every database stores (< year 10000).
MAX_DELAY = timedelta(days=100 * 365)
#: Largest integer option (priority and the ms options): a signed 32-bit column's.
MAX_INT = 2_147_483_647


def text_problem(value: str) -> str | None:
    """Say why ``value`` cannot be stored as text on every database, else None.

    Returns
    -------
    str or None
        A phrase that completes "The <what> ..." (``"contains a NUL character, ..."``),
        or None when PostgreSQL, MariaDB and SQLite all store ``value`` as given.
    """
    if "\x00" in value:
        return "contains a NUL character, which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8 text (it contains a lone surrogate)"
    return None


def check_text(value: Any, what: str) -> str:
    """Return ``value`` if it is 1 to 1,024 bytes of UTF-8 without NUL, else raise.

    Raises
    ------
    InvalidJobId
        If ``value`` is not a string, is empty, is longer than 1,024 UTF-8 bytes,
        contains a NUL character or a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidJobId(f"{what} must be a string: got {type(value).__name__}.")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidJobId(f"{what} {problem}: got {value!r}; remove that character.")
    size = len(value.encode("utf-8"))
    if not 1 <= size <= MAX_ID_BYTES:
        raise InvalidJobId(f"{what} must be 1 to {MAX_ID_BYTES} bytes of UTF-8: got {size} bytes.")
    return value


#: The rule of a queue name, as every error about one says it. See docs/gateway.md
#: "Queue names": a name must survive as one URL path segment of the console and the
#: gateway, and a proxy or client decodes ``%2F`` to ``/`` and drops ``.`` and ``..``.
QUEUE_NAME_RULE = (
    "a queue name is 1 to 100 characters, with no '/', no '\\', no control character "
    "(U+0000 to U+001F, U+007F), no lone surrogate, and is not '.' or '..'"
)

#: The characters a queue name may not contain: path separators and control characters.
_QUEUE_REFUSED = re.compile(r"[/\\\x00-\x1f\x7f]")


def queue_name_problem(queue: Any) -> str | None:
    """Say why ``queue`` breaks :data:`QUEUE_NAME_RULE`, else None.

    Returns
    -------
    str or None
        A short reason (``"contains '/'"``), or None when ``queue`` is a queue name.
    """
    if not isinstance(queue, str):
        return f"is a {type(queue).__name__}, not a string"
    if not 0 < len(queue) <= 100:
        return f"is {len(queue)} characters long"
    found = _QUEUE_REFUSED.search(queue)
    if found is not None:
        return f"contains {found.group()!r}"
    if queue in {".", ".."}:
        return f"is {queue!r}"
    return text_problem(queue)


def check_queue(queue: Any) -> str:
    """Return ``queue`` if it keeps :data:`QUEUE_NAME_RULE`, else raise.

    The one rule of every entry point of a queue name: the Python API, the gateway,
    ``django.tasks`` and the settings.

    Raises
    ------
    InvalidOption
        If ``queue`` breaks the rule; the message says how and states the rule.
    """
    problem = queue_name_problem(queue)
    if problem is not None:
        raise InvalidOption(f"The queue name {queue!r} {problem}: {QUEUE_NAME_RULE}.")
    return queue


def json_size(value: Any) -> int:
    """Return the size in bytes of ``value`` as JSON, as Django sends it to the database.

    That is ``json.dumps`` with its defaults (non-ASCII escaped), whose UTF-8 bytes
    are its characters.

    Raises
    ------
    InvalidPayload
        If ``value`` is not JSON (NaN, infinity, a type JSON lacks).
    """
    try:
        return len(json.dumps(value, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"The value is not JSON: {exc}.") from exc


def _refuse_size(size: int, what: str, max_bytes: int, setting: str) -> None:
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{what} is {size} bytes of JSON, over the limit of {max_bytes} bytes "
            f"(JOBQUEUE[{setting!r}]); store large data elsewhere and pass a reference."
        )


def check_result_size(result: Any, max_bytes: int) -> Any:
    """Return a handler's ``result`` if its JSON is at most ``max_bytes`` bytes, else raise.

    For the worker's store of a success: a result over ``JOBQUEUE["MAX_RESULT_BYTES"]``
    fails the attempt with this error's message, rather than a database error that
    loses the job. Pass that setting as ``max_bytes`` (bytes, see :func:`json_size`).

    Raises
    ------
    InvalidPayload
        If the result is not JSON, or its JSON is over ``max_bytes`` bytes (the
        message gives both sizes and names the setting).
    """
    _refuse_size(json_size(result), "The handler's result", max_bytes, "MAX_RESULT_BYTES")
    return result


def check_json(
    value: Any, what: str, *, max_bytes: int | None = None, setting: str = "MAX_PAYLOAD_BYTES"
) -> Any:
    """Return ``value`` if PostgreSQL, MariaDB and SQLite all store it as the same JSON.

    The checks of :func:`json_text`, which also returns the JSON text.

    Raises
    ------
    InvalidPayload
        As :func:`json_text`.
    """
    json_text(value, what, max_bytes=max_bytes, setting=setting)
    return value


def json_text(
    value: Any, what: str, *, max_bytes: int | None = None, setting: str = "MAX_PAYLOAD_BYTES"
) -> str:
    """Return the JSON text of ``value`` (``json.dumps``, as Django's ``JSONField``
    writes it) if PostgreSQL, MariaDB and SQLite all store it as the same JSON.

    JSON types only (no NaN or infinity), at most :data:`MAX_JSON_DEPTH` nested
    lists and objects, no string or key with a NUL character or a lone surrogate,
    and, given ``max_bytes``, at most that many bytes of JSON (:func:`json_size`);
    ``setting`` is the ``JOBQUEUE`` key the error names as that limit.

    Raises
    ------
    InvalidPayload
        If ``value`` is not such JSON; the message names ``what`` and the reason.
    """
    try:
        text = _JSON.encode(value)
    except (TypeError, ValueError) as exc:
        _check_json_texts(value, what)  # a bad string or a too deep nest is said first
        raise InvalidPayload(f"{what} is not JSON: {exc}.") from exc
    except RecursionError:  # nested deeper than Python's stack: the walk says how deep
        _check_json_texts(value, what)
        raise InvalidPayload(f"{what} nests lists and objects too deeply.") from None
    # The walk finds what json.dumps lets through. Its text, ASCII only, has a "\\u"
    # escape wherever a string holds a NUL, a surrogate or any non-ASCII character,
    # and a nest can be no deeper than its brackets: without either, skip the walk.
    if "\\u" in text or text.count("[") + text.count("{") >= MAX_JSON_DEPTH:
        _check_json_texts(value, what)
    if max_bytes is not None:  # ASCII only: its length is its size in UTF-8 bytes
        _refuse_size(len(text), what, max_bytes, setting)
    return text


#: json.dumps as Django's JSONField calls it, refusing NaN and infinity; one encoder
#: for every call (json.dumps with an argument builds a new one each time).
_JSON = json.JSONEncoder(allow_nan=False)


def _check_json_texts(value: Any, what: str) -> None:
    """Raise InvalidPayload for a nest deeper than MAX_JSON_DEPTH or a bad string or key."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            texts = [item]
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise InvalidPayload(
                    f"{what} nests lists and objects deeper than {MAX_JSON_DEPTH} levels, "
                    "which MariaDB refuses; flatten it."
                )
            inner = list(item.values()) if isinstance(item, dict) else list(item)
            stack.extend((child, depth + 1) for child in inner)
            texts = [key for key in item if isinstance(key, str)] if isinstance(item, dict) else []
        else:
            continue
        for text in texts:
            problem = text_problem(text)
            if problem is not None:
                raise InvalidPayload(
                    f"{what} has a string that {problem}: {text[:50]!r}; remove that character."
                )


def check_batch(items: Any, what: str) -> Iterable[Any]:
    """Return ``items`` if it is a batch: a list, tuple or other iterable, not a
    mapping nor a string (which iterate as keys or letters, never as jobs).

    ``what`` names the items in the message, such as ``"jobs"`` or ``"payloads"``.

    Raises
    ------
    InvalidRequest
        If ``items`` is a mapping, a string or bytes, or not iterable.
    """
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidRequest(
            f"{what} must be a list (one item per job): got {type(items).__name__}."
        )
    return items


def check_delay(delay: Any) -> timedelta:
    """Parse ``delay`` (see :func:`~django_jobqueue.core.durations.parse_duration`), bounded.

    Raises
    ------
    InvalidOption
        If ``delay`` is not a duration, is negative, or is longer than 100 years.
    """
    parsed = parse_duration(delay, name="delay")
    if parsed > MAX_DELAY:
        raise InvalidOption(
            f"delay must be at most {MAX_DELAY.days} days: got {delay!r}; use at= for a fixed date."
        )
    return parsed


def check_positive_int(value: Any, name: str, minimum: int = 1, maximum: int = MAX_INT) -> int:
    """Return ``value`` if it is an int (not a bool) from ``minimum`` to ``maximum``.

    Raises
    ------
    InvalidOption
        Otherwise; the message names the option ``name`` and the bounds.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidOption(
            f"{name} must be an integer from {minimum} to {maximum}: got {value!r}."
        )
    return value


def hold_hash(text: str) -> str:
    """Return the hex SHA-256 of ``text``'s UTF-8 bytes: the indexed form of a hold.

    Comparing hashes compares ids byte for byte, whatever the database collation.
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
