"""Job types used by the tests, one module per area (worker, ids, unique, ...)."""
