"""Triton's interpreter (TRITON_INTERPRET=1, how the Triton kernels of sparse_gemm and tsparse run
on a CPU) with the GPU's bf16 arithmetic: numpy has no bf16, so the interpreter keeps bf16 values as
their uint16 bits, and its tl.dot multiplies those bits as integers, and its fp32 -> bf16 cast
truncates. `patch()` widens bf16 dot operands to fp32 first (exact, as the tensor cores multiply
bf16 exactly into fp32) and rounds fp32 -> bf16 to nearest even (cvt.rn.bf16.f32). Needs
triton >= 3.7 beside numpy >= 2.4 (3.6's interpreter converts 1-element arrays with int(), which
numpy 2.4 refuses)."""

from __future__ import annotations

import os

import numpy as np


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def without_gpu() -> None:
    """Where torch sees no CUDA GPU, run Triton kernels in the interpreter (TRITON_INTERPRET=1 unless
    already set) with the bf16 fixes of :func:`patch`. A kernel module calls this before it imports
    Triton: the interpreter is chosen when ``@triton.jit`` runs."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if interpreting():
        patch()


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round to nearest even; NaN stays a quiet NaN."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def patch() -> None:
    """Install the bf16 fixes into Triton's interpreter builder (idempotent)."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    if getattr(builder, "_repro_bf16", False):
        return
    cast, dot = builder.cast_impl, builder.create_dot

    def cast_impl(self, src, dst_type):
        s, d = src.dtype.scalar, dst_type.scalar
        if s == tl.float32 and d == tl.bfloat16:
            return interp.TensorHandle(f32_to_bf16_bits(src.data), d)
        if s == tl.bfloat16 and d == tl.float32:
            return interp.TensorHandle(bf16_bits_to_f32(src.data), d)
        if s == tl.bfloat16:
            return cast(self, interp.TensorHandle(bf16_bits_to_f32(src.data), tl.float32), dst_type)
        return cast(self, src, dst_type)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        def wide(h):
            return interp.TensorHandle(bf16_bits_to_f32(h.data), tl.float32) if h.dtype.scalar == tl.bfloat16 else h
        return dot(self, wide(a), wide(b), d, input_precision, max_num_imprecise_acc)

    builder.cast_impl = cast_impl
    builder.create_fp_trunc = lambda self, src, dst_type: cast_impl(self, src, dst_type)
    builder.create_fp_ext = lambda self, src, dst_type: cast_impl(self, src, dst_type)
    builder.create_dot = create_dot
    builder._repro_bf16 = True
