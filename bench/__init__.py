"""Benchmarks run by hand (never by ``make test``); ``bench`` is also a Django app of
the benchmark settings, whose ``jobs`` module holds the benchmark job types."""
