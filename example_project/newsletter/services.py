"""The sign-up service: what the view, the seed command and the tests call."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from .jobs import send_welcome
from .models import Subscriber


class AlreadySubscribed(Exception):
    """The e-mail address is already on the list."""


def subscribe(email: str, name: str = "") -> Subscriber:
    """Save a subscriber and enqueue its welcome mail in one transaction.

    The job exists if and only if the subscriber commits: an error anywhere in
    the block rolls back both.

    Parameters
    ----------
    email:
        The address, already normalised (lower case, stripped).
    name:
        Optional display name.

    Returns
    -------
    Subscriber
        The saved subscriber, with ``welcome_jid`` set.

    Raises
    ------
    AlreadySubscribed
        If the address is already subscribed (a race the form's check missed).
    """
    try:
        with transaction.atomic():
            subscriber = Subscriber.objects.create(email=email, name=name)
            result = send_welcome.enqueue({"subscriber_id": subscriber.pk})
            subscriber.welcome_jid = result.jid
            subscriber.save(update_fields=["welcome_jid"])
    except IntegrityError as exc:
        raise AlreadySubscribed(f"{email} is already subscribed.") from exc
    return subscriber
