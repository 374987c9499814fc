"""Shared pytest configuration."""

# Notebooks under tests/ are test data (e.g. the grader's hostile submissions), not course
# notebooks: nbval must not execute them.
collect_ignore_glob = ["**/*.ipynb"]
