"""COMET-style error-bounded lossy compression of activations (Jin et al., VLDB 2022)."""
