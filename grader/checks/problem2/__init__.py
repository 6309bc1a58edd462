"""Problem 2 checks (map below)."""
