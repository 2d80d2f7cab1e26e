"""Region region_444ada3c1594d9d4: a region of log_softmax: _log_softmax; reads x (4096, 16384) float32; writes (4096, 16384) float32.

The model's PyTorch source it covers:
    log_softmax.py:10 (forward): return torch.log_softmax(x, dim=1)

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

KERNEL_TYPE = "region_444ada3c1594d9d4"

# The kernels, in launch order:
#   k0: triton_red_fused__log_softmax_prepare_softmax_online_sub_0
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
def triton_red_fused__log_softmax_prepare_softmax_online_sub_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
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
    _tmp2_max = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    _tmp2_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 16384*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])

        _tmp2_max_next, _tmp2_sum_next = triton_helpers.online_softmax_combine(
            _tmp2_max, _tmp2_sum, tmp1, False
        )

        _tmp2_max = tl.where(r0_mask, _tmp2_max_next, _tmp2_max)
        _tmp2_sum = tl.where(r0_mask, _tmp2_sum_next, _tmp2_sum)

    tmp2, tmp3 = triton_helpers.online_softmax_reduce(
        _tmp2_max, _tmp2_sum, 1, False)
    tmp2 = tmp2[:, None]
    tmp3 = tmp3[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp4 = tl.load(in_ptr0 + (r0_1 + 16384*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp5 = tmp4 - tmp2
        tmp6 = tl_math.log(tmp3)
        tmp7 = tmp5 - tmp6
        tl.store(out_ptr2 + (r0_1 + 16384*x0), tmp7, r0_mask)


def kernel_fn(x):
    device = x.device
    buf2 = torch.empty_strided((4096, 16384), (16384, 1), dtype=torch.float32, device=device)
    # [_log_softmax_default], Original ATen: [prims.prepare_softmax_online, aten.sub, aten._log_softmax]
    triton_red_fused__log_softmax_prepare_softmax_online_sub_0[(triton.cdiv(4096, TUNABLES['k0_XBLOCK']),)](x, buf2, 4096, 16384, XBLOCK=TUNABLES['k0_XBLOCK'], R0_BLOCK=TUNABLES['k0_R0_BLOCK'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    return buf2
