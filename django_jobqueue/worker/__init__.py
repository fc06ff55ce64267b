"""The consumer side: foreman, governor, executor and middleware (docs/design.md#execution)."""
