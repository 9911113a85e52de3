"""Tolerances for tests that compare two computation orders of the same math.

Two orders of a float sum (a grouped forward against a full one, a cached decoder against an uncached one, a fast
formula against its plain form) agree only to their last bits, and which last bits depends on the CPU: torch's x86
builds pick MKL and ATen kernels by instruction set (AVX-512, AVX2, SSE), each with its own order of summation. A
float32 tolerance read off one machine fails on another (it did: 1.14e-5 against 1e-5 on an AMD EPYC). So such
comparisons run in float64, with a tolerance derived from float64's epsilon, not from what one CPU produced:

- a sum of n terms reordered moves by at most ~n * eps * sum(|terms|) (the classic bound); 1e6 * eps covers sums
  of up to a million terms of the output's size, far more than any forward here has;
- 1e6 * float64's eps is 2.2e-10, still ~500x tighter than float32's eps (1.2e-7): a path that quietly computes in
  float32 fails it, so the float64 comparison cannot pass by accident.

Where float32 is the point (a run's metrics read back from its log), `float32_tolerance` gives the same bound in
float32 for the number of terms and the magnitude involved.
"""

from __future__ import annotations

import torch

F64_EPS = torch.finfo(torch.float64).eps
F32_EPS = torch.finfo(torch.float32).eps
# n * eps for the largest reordered sums a test here compares (see above).
ORDER_TERMS = 1e6


def assert_same_math(got: torch.Tensor, want: torch.Tensor, msg: str | None = None) -> None:
    """got == want up to a change in the order of float64 sums: relative to the larger of 1 and want's largest
    magnitude (an absolute floor for entries near 0, whose rounding comes from the larger terms they were summed
    from). Both must be float64."""
    assert got.dtype == want.dtype == torch.float64, (got.dtype, want.dtype)
    tol = ORDER_TERMS * F64_EPS
    scale = max(1.0, float(want.detach().abs().max())) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale, msg=msg)


def float32_tolerance(terms: int, magnitude: float = 1.0) -> float:
    """The absolute difference two float32 orders of a sum of `terms` terms of about `magnitude` can show: terms *
    eps * magnitude (the worst case of the classic bound, which no CPU's kernels exceed)."""
    return terms * F32_EPS * magnitude


def same_math(want: float):
    """pytest.approx for a number logged by a float64 run: equal to `want` up to float64 orders of summation."""
    import pytest

    tol = ORDER_TERMS * F64_EPS
    return pytest.approx(want, rel=tol, abs=tol)
