"""The newsletter app of the example project: sign-ups, issues and their mail jobs."""
