"""The example project: a small newsletter sign-up site that uses django-jobqueue."""
