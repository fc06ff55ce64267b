"""The sign-up page and the thank-you page."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from .forms import SubscribeForm
from .models import Issue
from .services import AlreadySubscribed, subscribe


def signup(request: HttpRequest) -> HttpResponse:
    """Show the form; on a valid POST save the subscriber and enqueue the welcome mail."""
    form = SubscribeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            subscriber = subscribe(form.cleaned_data["email"], form.cleaned_data["name"])
        except AlreadySubscribed:
            form.add_error("email", "This address is already subscribed.")
        else:
            messages.success(
                request, f"Welcome aboard! A welcome mail is on its way to {subscriber.email}."
            )
            return redirect("newsletter:thanks")
    issues = Issue.objects.filter(published=True)[:5]
    return render(request, "newsletter/signup.html", {"form": form, "issues": issues})


def thanks(request: HttpRequest) -> HttpResponse:
    """Say thank you after a sign-up."""
    return render(request, "newsletter/thanks.html")
