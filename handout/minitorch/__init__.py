"""minitorch (parallelism homework): pipeline and tensor parallelism on PyTorch."""
