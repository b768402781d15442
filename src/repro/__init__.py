"""repro: reproducible artifact evaluation for GPU-systems and DL-systems papers."""

__version__ = "0.1.0"
