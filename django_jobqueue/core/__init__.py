"""The leaves: settings, durations, typed errors, validation, signals and clocks.

Nothing here imports another layer of the package; every other layer may import these
(the layer table is in the package docstring of :mod:`django_jobqueue`; the rules are in
docs/design.md, "Layers").
"""
