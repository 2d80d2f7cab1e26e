"""Region region_aa1fcf025f2e0c36: a region of cumsum_rows: cumsum; reads x (4096, 4096) float32; writes (4096, 4096) float32.

The model's PyTorch source it covers:
    cumsum_rows.py:10 (forward): return torch.cumsum(x, dim=1)

Starter: the Triton code torch.compile's Inductor generated for this region (torch 2.11.0+cu130, Triton 3.6.0, on cuda),
made a plain kernel file: Inductor's kernels as it wrote them, the launch grid its launcher computes for
each, the config it chose for each as TUNABLES (without a GPU nothing was autotuned: starter sizes for
Triton's interpreter), and kernel_fn in place of its wrapper. It runs at torch.compile's speed; beat it.
"""

import os

import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import math as tl_math

if os.environ.get("TRITON_INTERPRET") == "1":     # Triton's interpreter cannot call CUDA's libdevice
    from autokernel.interpreter_libdevice import libdevice
else:
    from torch._inductor.runtime.triton_helpers import libdevice

KERNEL_TYPE = "region_aa1fcf025f2e0c36"

# The kernels, in launch order:
#   k0: triton_red_fused_cumsum_0
TUNABLES = {
    'k0_XBLOCK': 1,
    'k0_R0_BLOCK': 2048,
    'k0_num_warps': 16,
    'k0_num_stages': 1,
}
TUNABLE_CHOICES = {
    'k0_XBLOCK': [1, 2, 4, 8],
    'k0_R0_BLOCK': [256, 512, 1024, 2048, 4096],
    'k0_num_warps': [1, 2, 4, 8, 16],
    'k0_num_stages': [1, 2, 3, 4],
}


@triton.jit
def triton_red_fused_cumsum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 4096
    r0_numel = 4096
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    tmp3 = tl.full([XBLOCK, 1], float('nan'), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 4096*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp4, = tl.associative_scan((tmp2,), 1, _triton_helper_fn_add0)
        tmp5 = triton_helpers.select_one((tmp4), rbase == (RBLOCK - 1), dim=-1, keep_dims=True)
        tmp6 = tmp3 + tmp5
        tmp7 = tmp3 + tmp4
        tmp8 = tl.where(roffset > 0, tmp7, tmp4)
        tmp3 = tl.where(roffset > 0, tmp6, tmp5)
        tl.store(out_ptr0 + (r0_1 + 4096*x0), tmp8, r0_mask)


def kernel_fn(x):
    device = x.device
    buf0 = torch.empty_strided((4096, 4096), (4096, 1), dtype=torch.float32, device=device)
    # [cumsum_default], Original ATen: [aten.cumsum]
    triton_red_fused_cumsum_0[(triton.cdiv(4096, TUNABLES['k0_XBLOCK']),)](x, buf0, 4096, 4096, XBLOCK=TUNABLES['k0_XBLOCK'], R0_BLOCK=TUNABLES['k0_R0_BLOCK'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    return buf0
