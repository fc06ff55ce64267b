"""The consumer side: foreman, governor, executor and middleware (seed 004)."""
