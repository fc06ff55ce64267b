"""The store: rows, locks and the registries every upper layer writes through.

Modules here may import each other and the leaves (:mod:`django_jobqueue.core`), never a
layer above (the layer table is in the package docstring of :mod:`django_jobqueue`; the
rules are in docs/design.md, "Layers"). :mod:`django_jobqueue.models` belongs to this
layer too, but stays where Django looks for it.
"""
