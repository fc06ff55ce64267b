"""Create (or reset) the demo's superuser and print its credentials."""

from __future__ import annotations

import argparse
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo superuser, or reset its password; idempotent. For demos only."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--username", default="admin", help="Default %(default)r.")
        parser.add_argument("--password", default="admin", help="Default %(default)r.")

    def handle(self, *args: Any, username: str, password: str, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        self.stdout.write(
            f"demo_admin: {'created' if created else 'reset'} superuser "
            f"username={username} password={password}"
        )
