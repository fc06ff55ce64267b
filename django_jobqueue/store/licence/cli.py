"""``python -m django_jobqueue.store.licence``: make signing keys, issue and verify licence keys.

Needs no Django settings and makes no network call; see ``docs/licence.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path

from .keys import generate_key_pair, key_fingerprint
from .token import as_utc, describe_licence, end_of, issue_licence, verify_licence

__all__ = ["main"]


def _parse_expires(text: str) -> datetime:
    """Parse ``--expires``: ``YYYY-MM-DD`` (23:59:59 UTC that day) or an ISO datetime."""
    try:
        if len(text) == len("YYYY-MM-DD"):
            return end_of(date.fromisoformat(text))
        return as_utc(datetime.fromisoformat(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not YYYY-MM-DD or an ISO-8601 datetime"
        ) from exc


def _write_new(path: Path, text: str, *, mode: int, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text)
    os.chmod(path, mode)


def _cmd_keygen(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    private_pem, public_pem = generate_key_pair()
    private_path, public_path = out / f"{args.name}.key", out / f"{args.name}.pub"
    try:
        _write_new(private_path, private_pem, mode=0o600, force=args.force)
        _write_new(public_path, public_pem, mode=0o644, force=args.force)
    except FileExistsError as exc:
        sys.stderr.write(f"{exc.filename} exists; pass --force to overwrite it.\n")
        return 1
    sys.stdout.write(
        f"private key: {private_path} (keep it secret)\n"
        f"public key:  {public_path}\n"
        f"key id:      {key_fingerprint(public_pem)}\n"
    )
    return 0


def _cmd_issue(args: argparse.Namespace) -> int:
    try:
        token = issue_licence(
            Path(args.private_key).read_bytes(),
            licensee=args.licensee,
            edition=args.edition,
            expires_at=args.expires,
            key_id=args.key_id,
        )
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"Cannot issue a licence: {exc}\n")
        return 1
    sys.stdout.write(token + "\n")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    key = sys.stdin.read() if args.key == "-" else args.key
    try:
        public_keys = [Path(p).read_bytes() for p in args.public_key] if args.public_key else None
        licence = verify_licence(key, public_keys=public_keys)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"Cannot verify: {exc}\n")
        return 2
    sys.stdout.write(f"{licence.status}: {describe_licence(licence)}\n")
    return 0 if licence.is_pro else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m django_jobqueue.store.licence``: ``keygen``, ``issue`` or ``verify``.

    Needs no Django settings and makes no network call.

    Parameters
    ----------
    argv
        The arguments after the program name; ``None`` means ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 on success; 1 if a file exists (``keygen``), the key cannot
        be issued (``issue``) or does not put Pro in force (``verify``); 2 on bad usage.

    Implements: docs/design.md#core-and-pro.
    """
    parser = argparse.ArgumentParser(
        prog="python -m django_jobqueue.store.licence",
        description="Make signing keys, issue and verify django-jobqueue licence keys.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    keygen = commands.add_parser("keygen", help="make an Ed25519 key pair (NAME.key, NAME.pub)")
    keygen.add_argument("--out", type=Path, required=True, help="folder to write the pair to")
    keygen.add_argument("--name", default="vendor", help="file stem (default: %(default)r)")
    keygen.add_argument("--force", action="store_true", help="overwrite existing files")
    keygen.set_defaults(handler=_cmd_keygen)

    issue = commands.add_parser("issue", help="sign a licence key and print it")
    issue.add_argument("--private-key", required=True, help="PEM or base64 private key file")
    issue.add_argument("--licensee", required=True, help="who the licence is for")
    issue.add_argument(
        "--expires",
        required=True,
        type=_parse_expires,
        help="last valid day YYYY-MM-DD (until 23:59:59 UTC) or an ISO-8601 datetime",
    )
    issue.add_argument("--edition", default="pro", choices=["pro"], help="(default: %(default)r)")
    issue.add_argument(
        "--key-id", default=None, help="key_id claim (default: the signing key's fingerprint)"
    )
    issue.set_defaults(handler=_cmd_issue)

    verify = commands.add_parser("verify", help="verify a licence key offline")
    verify.add_argument("key", help="the licence key, or - to read it from stdin")
    verify.add_argument(
        "--public-key",
        action="append",
        default=[],
        help="trust this public key file instead of the shipped ones (repeatable)",
    )
    verify.set_defaults(handler=_cmd_verify)

    args = parser.parse_args(argv)
    return int(args.handler(args))
