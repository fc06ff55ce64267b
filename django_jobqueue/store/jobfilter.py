"""The job filter language, one for the console, the CLI and the gateway (docs/console.md
"Search syntax").

A filter is terms separated by spaces; terms with different keys must all match,
terms repeating one key match any of their values::

    queue:emails type:send_invoice state:failed since:2h error:"timed out"
    payload.customer_id:42 payload.address.country:"NL"

==========================  =====================================================
``queue:NAME``              the job's queue
``type:NAME``               the job's type
``state:WORD``              a state word (scheduled, waiting, running, failed,
                            done, cancelled) or a stored status (``status:retry``
                            is written ``state:status:retry``)
``since:WHEN``              created at or after WHEN: an ISO 8601 date or time
                            (UTC unless it says otherwise) or a duration ago
                            (``90s``, ``15m``, ``2h``, ``7d``)
``until:WHEN``              created before WHEN (same forms)
``error:TEXT``              an attempt's error contains TEXT (any case)
``payload.PATH:VALUE``      the payload's member at PATH (dot-separated keys)
                            equals VALUE: a JSON number, ``true``, ``false`` or
                            ``null`` as such, any other word (or a quoted one,
                            ``"42"``) as a string
a bare word                 a jid, or a job's numeric id
==========================  =====================================================

A value with spaces is double-quoted (``\\"`` inside is a quote). Payload terms use
JSON containment on PostgreSQL (``payload @> '{...}'``, which a GIN index can serve)
and on MariaDB (``JSON_CONTAINS``), ``JSON_EXTRACT`` on SQLite: all three tell the
number 42 from the string "42". An unknown key, an empty value, an unknown
state or an unreadable time raises :class:`FilterError`, naming the term.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ..core.durations import parse_duration
from ..core.exceptions import InvalidRequest, JobQueueError
from ..core.validation import text_problem
from ..models import Job, JobStatus
from . import states
from .managers import hold_hash

__all__ = ["KEYS", "MAX_LENGTH", "FilterError", "JobQuery", "filter_jobs", "parse_filter"]

#: The keys a term may have (besides ``payload.PATH``).
KEYS = ("queue", "type", "state", "since", "until", "error")
#: The longest filter accepted, characters.
MAX_LENGTH = 2_000
#: The most levels a payload path may have.
MAX_PATH_DEPTH = 8

_TERM = re.compile(r'\s*(?:([A-Za-z_][\w.\-]*):)?("(?:[^"\\]|\\.)*"?|\S+)')
_PATH_KEY = re.compile(r"^[A-Za-z0-9_\-]{1,100}$")
_STATE_WORDS = {
    **{word: states.state_filter(word) for word in states.STATES},
    **{f"status:{status}": states.status_filter(status) for status in JobStatus.values},
    "dead": states.state_filter(states.FAILED),
}


class FilterError(InvalidRequest):
    """A filter that cannot be read: ``term`` is the offending term as written."""

    code = "invalid_filter"

    def __init__(self, message: str, term: str) -> None:
        super().__init__(message)
        self.term = term


@dataclass
class JobQuery:
    """A parsed filter: per key, the alternatives (each a ``Q``), and a description."""

    #: key -> list of Q; alternatives of one key are OR-ed, keys AND-ed.
    terms: dict[str, list[Q]] = field(default_factory=dict)
    #: (key, value) pairs as read, for audit targets and messages.
    parts: list[tuple[str, str]] = field(default_factory=list)
    #: The queues named by ``queue:`` terms (for token checks at the gateway).
    queues: list[str] = field(default_factory=list)
    #: Payload terms as (path, value), turned into vendor SQL by :meth:`apply`.
    payload: list[tuple[list[str], Any]] = field(default_factory=list)
    #: Bare words (a jid, a held id, a numeric primary key), any of which may match;
    #: :meth:`apply` finds their jobs first (:func:`_id_keys`).
    words: list[str] = field(default_factory=list)

    def apply(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        """Return ``jobs`` narrowed by this filter (on ``jobs``' database).

        Bare words cost one or two indexed reads here (:func:`_id_keys`); the rest is
        lazy, as a QuerySet is.
        """
        if self.words:
            jobs = jobs.filter(pk__in=_id_keys(jobs.db, self.words))
        for alternatives in self.terms.values():
            match = Q()
            for alternative in alternatives:
                match |= alternative
            jobs = jobs.filter(match)
        # Containment where the vendor has it (PostgreSQL's @>, MariaDB's and MySQL's
        # JSON_CONTAINS, both type-aware: 42 is not "42"); SQLite's JSON_EXTRACT
        # returns typed values, so an equality on the member is as strict there.
        containment = connections[jobs.db].vendor in ("postgresql", "mysql")
        for path, value in self.payload:
            if containment:
                nested: Any = value
                for key in reversed(path):
                    nested = {key: nested}
                jobs = jobs.filter(payload__contains=nested)
            elif value is None:
                jobs = jobs.filter(**{"payload__" + "__".join(path): None})
            else:
                jobs = jobs.filter(**{"payload__" + "__".join(path): value})
        return jobs

    def describe(self) -> str:
        """The filter in words, normalised (``queue=emails, payload.id=42``)."""
        return ", ".join(f"{k}={v}" for k, v in self.parts) or "every job"


def parse_filter(text: str, *, now: datetime | None = None) -> JobQuery:
    """Read a filter (module docstring) into a :class:`JobQuery`.

    Parameters
    ----------
    text
        The filter, at most :data:`MAX_LENGTH` characters; empty selects every job.
    now
        What relative times (``since:2h``) count back from; default the current time.

    Raises
    ------
    FilterError
        The first term that cannot be read, named in the message and in ``term``.
    """
    if not isinstance(text, str):
        raise FilterError("A filter is a string.", term="")
    if len(text) > MAX_LENGTH:
        raise FilterError(f"A filter is at most {MAX_LENGTH} characters.", term=text[:40])
    problem = text_problem(text) if text else None
    if problem is not None:
        raise FilterError(f"A filter {problem}; remove that character.", term=repr(text[:40]))
    query = JobQuery()
    position = 0
    text = text.strip()
    while position < len(text):
        found = _TERM.match(text, position)
        if not found or found.end() == position:  # pragma: no cover (the pattern eats a char)
            raise FilterError(f"Cannot read the filter at {text[position:]!r}.", text[position:])
        position = found.end()
        key, raw = found.group(1), found.group(2)
        term = found.group(0).strip()
        if key is None and ":" in raw and not raw.startswith('"'):
            key, raw = raw.split(":", 1)  # a key the pattern refused: named in the error
        value, quoted = _unquote(raw, term)
        if key is None:
            query.words.append(value)
            query.parts.append(("id", value))
        else:
            _read_term(query, key.lower(), value, quoted, term, now)
    return query


def filter_jobs(jobs: QuerySet[Job], text: str) -> QuerySet[Job]:
    """Return ``jobs`` narrowed by the filter ``text``; raises :class:`FilterError`."""
    return parse_filter(text).apply(jobs)


def _unquote(raw: str, term: str) -> tuple[str, bool]:
    if not raw.startswith('"'):
        return raw, False
    if len(raw) < 2 or not raw.endswith('"') or raw.endswith('\\"') and not raw.endswith('\\\\"'):
        raise FilterError(f"The quote of {term!r} is not closed.", term)
    return re.sub(r"\\(.)", r"\1", raw[1:-1]), True


def _add(query: JobQuery, key: str, value: str, match: Q) -> None:
    query.terms.setdefault(key, []).append(match)
    query.parts.append((key, value))


def _read_term(
    query: JobQuery, key: str, value: str, quoted: bool, term: str, now: datetime | None
) -> None:
    if value == "":
        raise FilterError(f"The term {term!r} has no value.", term)
    if key.startswith("payload."):
        path = key.split(".")[1:]
        if not path or len(path) > MAX_PATH_DEPTH or not all(_PATH_KEY.match(p) for p in path):
            raise FilterError(
                f"The term {term!r} names no payload member: write payload.KEY:VALUE, "
                f"keys of letters, digits, _ and -, at most {MAX_PATH_DEPTH} deep.",
                term,
            )
        scalar = value if quoted else _json_scalar(value)
        query.payload.append((path, scalar))
        query.parts.append((key, value))
        return
    if key == "queue":
        query.queues.append(value)
        _add(query, key, value, Q(queue=value))
    elif key == "type":
        _add(query, key, value, Q(job_type=value))
    elif key == "state":
        if value.lower() not in _STATE_WORDS:
            raise FilterError(
                f"The term {term!r} names no state; use one of {', '.join(states.STATES)} "
                "or status:<stored status>.",
                term,
            )
        _add(query, key, value, _STATE_WORDS[value.lower()])
    elif key in ("since", "until"):
        when = _when(value, term, now)
        lookup = "created_at__gte" if key == "since" else "created_at__lt"
        _add(query, key, when.isoformat(), Q(**{lookup: when}))
    elif key == "error":
        _add(query, key, value, Q(errors__icontains=value))
    else:
        raise FilterError(
            f"The term {term!r} has an unknown key {key!r}; use one of "
            f"{', '.join(KEYS)} or payload.KEY.",
            term,
        )


def _json_scalar(value: str) -> Any:
    if value in ("true", "false", "null") or re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", value):
        try:
            return json.loads(value)
        except ValueError:  # pragma: no cover (the pattern admits JSON numbers only)
            return value
    return value


def _when(value: str, term: str, now: datetime | None) -> datetime:
    try:
        moment = parse_datetime(value) if "T" in value or " " in value else None
    except ValueError:
        moment = None
    if moment is None and (day := _date(value)) is not None:
        moment = datetime(day.year, day.month, day.day)
    if moment is not None:
        return moment if timezone.is_aware(moment) else moment.replace(tzinfo=UTC)
    try:
        ago = parse_duration(value, name=term)
    except (JobQueueError, ValueError, TypeError) as exc:
        raise FilterError(
            f"The term {term!r} has no time: give an ISO 8601 date or time "
            "(2026-12-03, 2026-12-03T14:00Z) or a duration ago (90s, 15m, 2h, 7d).",
            term,
        ) from exc
    return (now or timezone.now()) - ago


def _date(value: str) -> Any:
    try:
        return parse_date(value)
    except ValueError:
        return None


def _id_keys(using: str, words: list[str]) -> list[int]:
    """Return the primary keys of the jobs that ``words`` name: by jid, by held id (its
    hash), or as a numeric primary key (kept as given: the filter checks it exists).

    One read per column, each over its own index (``jid``'s unique index, the hold
    hash's index of migration 0025), instead of one ``jid = w OR job_id_hash = h OR
    id = n`` beside the list's ``ORDER BY id DESC LIMIT``: MariaDB and SQLite answered
    that by reading the primary key backwards through every job (docs/console.md
    "Speed at a million jobs"). The jobs found are at most one per jid and one per
    queue per held id.
    """
    jobs = Job.objects.using(using).order_by()
    keys = set(jobs.filter(jid__in=words).values_list("pk", flat=True))
    keys.update(
        jobs.filter(job_id_hash__in=[hold_hash(w) for w in words]).values_list("pk", flat=True)
    )
    keys.update(int(w) for w in words if w.isdigit() and len(w) < 19)
    return sorted(keys)
