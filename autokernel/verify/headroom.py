"""Where torch.compile's forward spends its GPU time, and the most any kernel outside the GEMMs could win.

verify shows this beside its verdict. When the compiled forward is mostly cuBLAS GEMMs, no kernel
elsewhere can make the model much faster, and the user should see that ceiling rather than hope
for more: on the LLaMA 4x1024 (H100, fp16) the GEMMs were 78% of the compiled forward's kernel
time, so even with every other kernel free it could be at most 1.41x faster
(benchmarks/results/2026-11-23_NVIDIA-H100_screen_and_headroom/).

Kernels are sorted into groups by name: cuBLAS, CUTLASS and nvjet kernels are GEMMs; flash, cuDNN
and fused multi-head attention kernels are attention; the rest (Inductor's fused Triton kernels,
copies, reductions) is what fusion and kernel tuning can still win back.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import torch

# Lower-case substrings of GPU kernel names, checked in this order; Inductor's own kernels
# ("triton_...") are "other" whatever they fuse.
GROUPS = (
    ("attention", ("flash", "fmha", "attention", "attn", "cudnn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "wgmma", "sm90_", "sm80_", "splitk", "ampere_")),
)
PROFILED_FORWARDS = 5


def kernel_group(name: str) -> str:
    """'gemm', 'attention' or 'other' for a GPU kernel's name."""
    lowered = name.lower()
    if lowered.startswith("triton"):
        return "other"
    for group, needles in GROUPS:
        if any(needle in lowered for needle in needles):
            return group
    return "other"


def group_times(kernel_us: dict[str, float]) -> dict[str, float]:
    """Microseconds per group from microseconds per kernel name."""
    groups = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for name, us in kernel_us.items():
        groups[kernel_group(name)] += us
    return groups


@dataclass(frozen=True)
class Headroom:
    """One compiled forward's GPU kernel time by group, and PyTorch's best whole-call time."""
    gemm_us: float
    attention_us: float
    other_us: float
    best_ms: float

    def ceiling(self, keep_attention: bool = False) -> float | None:
        """PyTorch's best over the time left if every kernel but the GEMMs (and attention) cost nothing."""
        floor_us = self.gemm_us + (self.attention_us if keep_attention else 0.0)
        return self.best_ms * 1e3 / floor_us if floor_us > 0 else None

    def summary(self) -> str:
        total = self.gemm_us + self.attention_us + self.other_us
        if total <= 0:
            return "the compiled forward ran no GPU kernel the profiler saw"
        share = {name: us / total for name, us in
                 (("GEMMs", self.gemm_us), ("attention", self.attention_us), ("the rest", self.other_us))}
        parts = ", ".join(f"{name} {value:.0%}" for name, value in share.items())
        ceiling = self.ceiling()
        limit = (f"even with every kernel but the GEMMs free, the model could be at most {ceiling:.2f}x "
                 f"PyTorch's best ({self.best_ms:.3f} ms)" if ceiling else "it runs no GEMM")
        return f"torch.compile's forward spends its GPU kernel time on {parts}: {limit}"

    def to_json(self) -> dict:
        return {"gemm_us": self.gemm_us, "attention_us": self.attention_us, "other_us": self.other_us,
                "best_ms": self.best_ms, "ceiling": self.ceiling(),
                "ceiling_keeping_attention": self.ceiling(keep_attention=True), "summary": self.summary()}


def profile_kernels(fn: Callable[[], object], forwards: int = PROFILED_FORWARDS) -> dict[str, float]:
    """GPU microseconds per call of fn, per kernel name (fn is called once first, unprofiled)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            per_kernel[event.name] += event.device_time_total / forwards
    return dict(per_kernel)


def kernel_times(fn: Callable[[], object]) -> dict[str, float] | None:
    """GPU microseconds per call of fn by kernel name, with the GPU to this run alone; None without a GPU. verify
    takes them from the compiled forward it has just timed, so that the model is not compiled once more for them."""
    if not torch.cuda.is_available():
        return None
    from autokernel.core.gpu_lock import gpu_to_itself
    from autokernel.verify.latency import first_call_unlocked

    first_call_unlocked(fn)        # what compiles on its first call compiles here, outside the GPU timing lock
    with gpu_to_itself():          # kernel times are taken with the GPU to this run alone
        return profile_kernels(fn)


def from_times(kernel_us: dict[str, float], best_ms: float) -> Headroom:
    groups = group_times(kernel_us)
    return Headroom(groups["gemm"], groups["attention"], groups["other"], best_ms)
