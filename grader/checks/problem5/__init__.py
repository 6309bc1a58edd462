"""Problem 5 checks (docstring below, written at the end)."""
