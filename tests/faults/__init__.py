"""Fault tests on their own servers (scripts/start-fault-servers)."""
