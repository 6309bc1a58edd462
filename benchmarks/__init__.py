"""Benchmarks (``make bench``): speed ratios measured side by side with minitorch.timing."""
