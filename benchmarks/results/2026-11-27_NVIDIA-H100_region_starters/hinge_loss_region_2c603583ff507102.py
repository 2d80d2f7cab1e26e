"""Region region_2c603583ff507102: a region of hinge_loss: mul -> rsub -> clamp -> mean; reads predictions (32768, 1024) float32, targets (32768, 1024) float32; writes () float32.

The model's PyTorch source it covers:
    hinge_loss.py:10 (forward): return torch.mean(torch.clamp(1 - predictions * targets, min=0))

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

KERNEL_TYPE = "region_2c603583ff507102"

# The kernels, in launch order:
#   k0: triton_red_fused_clamp_mean_mul_rsub_0
#   k1: triton_per_fused_clamp_mean_mul_rsub_1
#   k2: triton_red_fused_clamp_mean_mul_rsub_0_looped
#   k3: triton_red_fused_clamp_mean_mul_rsub_1_looped
#   k4: triton_red_fused_clamp_mean_mul_rsub_0_unsplit
TUNABLES = {
    'k0_XBLOCK': 1,
    'k0_R0_BLOCK': 2048,
    'k0_num_warps': 16,
    'k0_num_stages': 1,
    'k1_XBLOCK': 1,
    'k1_num_warps': 4,
    'k1_num_stages': 1,
    'k2_XBLOCK': 1,
    'k2_R0_BLOCK': 2048,
    'k2_num_warps': 16,
    'k2_num_stages': 1,
    'k3_XBLOCK': 1,
    'k3_R0_BLOCK': 512,
    'k3_num_warps': 4,
    'k3_num_stages': 1,
    'k4_XBLOCK': 1,
    'k4_R0_BLOCK': 2048,
    'k4_num_warps': 16,
    'k4_num_stages': 1,
    'reduction': 'inductor',
}
TUNABLE_CHOICES = {
    'k0_XBLOCK': [1, 2, 4, 8],
    'k0_R0_BLOCK': [256, 512, 1024, 2048, 4096],
    'k0_num_warps': [1, 2, 4, 8, 16],
    'k0_num_stages': [1, 2, 3, 4],
    'k1_XBLOCK': [1, 2, 4, 8],
    'k1_num_warps': [1, 2, 4, 8, 16],
    'k1_num_stages': [1, 2, 3, 4],
    'k2_XBLOCK': [1, 2, 4, 8],
    'k2_R0_BLOCK': [256, 512, 1024, 2048, 4096],
    'k2_num_warps': [1, 2, 4, 8, 16],
    'k2_num_stages': [1, 2, 3, 4],
    'k3_XBLOCK': [1, 2, 4, 8],
    'k3_R0_BLOCK': [64, 128, 256, 512, 1024, 2048, 4096],
    'k3_num_warps': [1, 2, 4, 8, 16],
    'k3_num_stages': [1, 2, 3, 4],
    'k4_XBLOCK': [1, 2, 4, 8],
    'k4_R0_BLOCK': [256, 512, 1024, 2048, 4096],
    'k4_num_warps': [1, 2, 4, 8, 16],
    'k4_num_stages': [1, 2, 3, 4],
    'reduction': ['inductor', 'looped', 'unsplit'],
}


@triton.jit
def triton_red_fused_clamp_mean_mul_rsub_0(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 512
    r0_numel = 65536
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp8 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 65536*x0), xmask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.load(in_ptr1 + (r0_1 + 65536*x0), xmask, eviction_policy='evict_first', other=0.0)
        tmp2 = tmp0 * tmp1
        tmp3 = tl.full([1, 1], 1.0, tl.float32)
        tmp4 = tmp3 - tmp2
        tmp5 = tl.full([1, 1], 0.0, tl.float32)
        tmp6 = triton_helpers.maximum(tmp4, tmp5)
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
        tmp9 = _tmp8 + tmp7
        _tmp8 = tl.where(xmask, tmp9, _tmp8)
    tmp8 = tl.sum(_tmp8, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp8, xmask)


@triton.jit
def triton_per_fused_clamp_mean_mul_rsub_1(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 1
    r0_numel = 512
    R0_BLOCK: tl.constexpr = 512
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_0 = r0_index
    tmp0 = tl.load(in_ptr0 + (r0_0), None)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.sum(tmp1, 1)[:, None].to(tl.float32)
    tmp4 = tl.full([1, 1], 33554432.0, tl.float32)
    tmp5 = (tmp3 / tmp4)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (tl.full([1, 1], 0, tl.int32).broadcast_to(XBLOCK, 1)), tmp5, None)


@triton.jit
def triton_red_fused_clamp_mean_mul_rsub_0_looped(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 512
    r0_numel = 65536
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp8 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 65536*x0), xmask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.load(in_ptr1 + (r0_1 + 65536*x0), xmask, eviction_policy='evict_first', other=0.0)
        tmp2 = tmp0 * tmp1
        tmp3 = tl.full([1, 1], 1.0, tl.float32)
        tmp4 = tmp3 - tmp2
        tmp5 = tl.full([1, 1], 0.0, tl.float32)
        tmp6 = triton_helpers.maximum(tmp4, tmp5)
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
        tmp9 = _tmp8 + tmp7
        _tmp8 = tl.where(xmask, tmp9, _tmp8)
    tmp8 = tl.sum(_tmp8, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp8, xmask)


@triton.jit
def triton_red_fused_clamp_mean_mul_rsub_1_looped(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1
    r0_numel = 512
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_0 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp3 = _tmp2 + tmp1
        _tmp2 = tl.where(r0_mask, tmp3, _tmp2)
    tmp2 = tl.sum(_tmp2, 1)[:, None]
    tmp4 = tl.full([1, 1], 33554432.0, tl.float32)
    tmp5 = (tmp2 / tmp4)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (tl.full([1, 1], 0, tl.int32).broadcast_to(XBLOCK, 1)), tmp5, None)


@triton.jit
def triton_red_fused_clamp_mean_mul_rsub_0_unsplit(in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1
    r0_numel = 33554432
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    _tmp8 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
        roffset = r0_offset
        rindex = r0_index
        r0_0 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_0), None, eviction_policy='evict_first')
        tmp1 = tl.load(in_ptr1 + (r0_0), None, eviction_policy='evict_first')
        tmp2 = tmp0 * tmp1
        tmp3 = tl.full([1, 1], 1.0, tl.float32)
        tmp4 = tmp3 - tmp2
        tmp5 = tl.full([1, 1], 0.0, tl.float32)
        tmp6 = triton_helpers.maximum(tmp4, tmp5)
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
        tmp9 = _tmp8 + tmp7
        _tmp8 = tmp9
    tmp8 = tl.sum(_tmp8, 1)[:, None]
    tmp10 = tl.full([1, 1], 33554432.0, tl.float32)
    tmp11 = (tmp8 / tmp10)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (tl.full([1, 1], 0, tl.int32).broadcast_to(XBLOCK, 1)), tmp11, None)


def kernel_fn(predictions, targets):
    if TUNABLES['reduction'] == 'inductor':
        return _inductor(predictions, targets)
    if TUNABLES['reduction'] == 'looped':
        return _looped(predictions, targets)
    if TUNABLES['reduction'] == 'unsplit':
        return _unsplit(predictions, targets)
    raise ValueError(f"TUNABLES['reduction'] is one of ['inductor', 'looped', 'unsplit']")


def _inductor(predictions, targets):
    device = predictions.device
    buf1 = torch.empty_strided((512,), (1,), dtype=torch.float32, device=device)
    # [mul_tensor, rsub_scalar, clamp_default, mean_default], Original ATen: [aten.mul, aten.rsub, aten.clamp, aten.mean]
    triton_red_fused_clamp_mean_mul_rsub_0[(triton.cdiv(512, TUNABLES['k0_XBLOCK']),)](predictions, targets, buf1, 512, 65536, XBLOCK=TUNABLES['k0_XBLOCK'], R0_BLOCK=TUNABLES['k0_R0_BLOCK'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    buf2 = torch.empty_strided((), (), dtype=torch.float32, device=device)
    buf3 = buf2
    # [mul_tensor, rsub_scalar, clamp_default, mean_default], Original ATen: [aten.mul, aten.rsub, aten.clamp, aten.mean]
    triton_per_fused_clamp_mean_mul_rsub_1[(triton.cdiv(1, TUNABLES['k1_XBLOCK']),)](buf3, buf1, 1, 512, XBLOCK=TUNABLES['k1_XBLOCK'], num_warps=TUNABLES['k1_num_warps'], num_stages=TUNABLES['k1_num_stages'])
    return buf3


def _looped(predictions, targets):
    device = predictions.device
    buf1 = torch.empty_strided((512,), (1,), dtype=torch.float32, device=device)
    # [mul_tensor, rsub_scalar, clamp_default, mean_default], Original ATen: [aten.mul, aten.rsub, aten.clamp, aten.mean]
    triton_red_fused_clamp_mean_mul_rsub_0_looped[(triton.cdiv(512, TUNABLES['k2_XBLOCK']),)](predictions, targets, buf1, 512, 65536, XBLOCK=TUNABLES['k2_XBLOCK'], R0_BLOCK=TUNABLES['k2_R0_BLOCK'], num_warps=TUNABLES['k2_num_warps'], num_stages=TUNABLES['k2_num_stages'])
    buf2 = torch.empty_strided((), (), dtype=torch.float32, device=device)
    buf3 = buf2
    # [mul_tensor, rsub_scalar, clamp_default, mean_default], Original ATen: [aten.mul, aten.rsub, aten.clamp, aten.mean]
    triton_red_fused_clamp_mean_mul_rsub_1_looped[(triton.cdiv(1, TUNABLES['k3_XBLOCK']),)](buf3, buf1, 1, 512, XBLOCK=TUNABLES['k3_XBLOCK'], R0_BLOCK=TUNABLES['k3_R0_BLOCK'], num_warps=TUNABLES['k3_num_warps'], num_stages=TUNABLES['k3_num_stages'])
    return buf3


def _unsplit(predictions, targets):
    device = predictions.device
    buf0 = torch.empty_strided((), (), dtype=torch.float32, device=device)
    buf1 = buf0
    # [mul_tensor, rsub_scalar, clamp_default, mean_default], Original ATen: [aten.mul, aten.rsub, aten.clamp, aten.mean]
    triton_red_fused_clamp_mean_mul_rsub_0_unsplit[(triton.cdiv(1, TUNABLES['k4_XBLOCK']),)](buf1, predictions, targets, 1, 33554432, XBLOCK=TUNABLES['k4_XBLOCK'], R0_BLOCK=TUNABLES['k4_R0_BLOCK'], num_warps=TUNABLES['k4_num_warps'], num_stages=TUNABLES['k4_num_stages'])
    return buf1
