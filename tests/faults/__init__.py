"""Fault tests on their own servers (scripts/start-fault-servers; issue 11 item 8)."""
