"""A small app of models and job types the test suite uses."""
