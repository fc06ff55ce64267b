"""Helpers of the schedule tests."""
