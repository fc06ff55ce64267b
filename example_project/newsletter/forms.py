"""The sign-up form."""

from __future__ import annotations

from django import forms

from .models import Subscriber


class SubscribeForm(forms.Form):
    """E-mail address (required, not yet subscribed) and an optional name."""

    email = forms.EmailField(label="E-mail address", max_length=254)
    name = forms.CharField(label="Name", max_length=100, required=False)

    def clean_email(self) -> str:
        """Normalise the address and refuse one that is already subscribed."""
        email = self.cleaned_data["email"].strip().lower()
        if Subscriber.objects.filter(email=email).exists():
            raise forms.ValidationError("This address is already subscribed.")
        return email
