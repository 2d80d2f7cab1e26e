"""Region region_091d4f27436a6bff: a region of l1_norm: abs -> sum -> div; reads x (4096, 16384) float32; writes (4096, 16384) float32.

The model's PyTorch source it covers:
    l1_norm.py:10 (forward): return x / torch.sum(torch.abs(x), dim=1, keepdim=True)

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

KERNEL_TYPE = "region_091d4f27436a6bff"

# The kernels, in launch order:
#   k0: triton_red_fused_abs_div_sum_0
TUNABLES = {
    'k0_XBLOCK': 1,
    'k0_R0_BLOCK': 16384,
    'k0_num_warps': 32,
    'k0_num_stages': 1,
}
TUNABLE_CHOICES = {
    'k0_XBLOCK': [1, 2, 4, 8],
    'k0_R0_BLOCK': [2048, 4096],
    'k0_num_warps': [1, 2, 4, 8, 16],
    'k0_num_stages': [1, 2, 3, 4],
}


@triton.jit
def triton_red_fused_abs_div_sum_0(in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 4096
    r0_numel = 16384
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp3 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 16384*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl_math.abs(tmp0)
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp4 = _tmp3 + tmp2
        _tmp3 = tl.where(r0_mask, tmp4, _tmp3)
    tmp3 = tl.sum(_tmp3, 1)[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp5 = tl.load(in_ptr0 + (r0_1 + 16384*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp6 = (tmp5 / tmp3)
        tl.store(out_ptr1 + (r0_1 + 16384*x0), tmp6, r0_mask)


def kernel_fn(x):
    device = x.device
    buf1 = torch.empty_strided((4096, 16384), (16384, 1), dtype=torch.float32, device=device)
    # [abs_default, sum_dim_int_list, div_tensor], Original ATen: [aten.abs, aten.sum, aten.div]
    triton_red_fused_abs_div_sum_0[(triton.cdiv(4096, TUNABLES['k0_XBLOCK']),)](x, buf1, 4096, 16384, XBLOCK=TUNABLES['k0_XBLOCK'], R0_BLOCK=TUNABLES['k0_R0_BLOCK'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    return buf1
