"""Region region_bc64aeae55aed02d: a region of multihead_attention: mm -> add; reads x (16, 512, 512) float32, in_proj_weight (1536, 512) float32, in_proj_bias (1536,) float32; writes (3, 512, 16, 512) float32.

The model's PyTorch source it covers:
    multihead_attention.py:14 (forward): return self.attn(x, x, x, need_weights=False)[0]

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

KERNEL_TYPE = "region_bc64aeae55aed02d"

# The kernels, in launch order:
#   k0: triton_poi_fused_clone_transpose_0
#   k1: triton_tem_fused__unsafe_view_clone_mm_t_transpose_1
#   k2: triton_poi_fused__unsafe_view_add_clone_squeeze_transpose_unsqueeze_view_2
TUNABLES = {
    'k0_XBLOCK': 1024,
    'k0_num_warps': 4,
    'k0_num_stages': 1,
    'k1_BLOCK_M': 128,
    'k1_BLOCK_N': 128,
    'k1_BLOCK_K': 32,
    'k1_GROUP_M': 8,
    'k1_num_warps': 4,
    'k1_num_stages': 3,
    'k2_XBLOCK': 1024,
    'k2_num_warps': 4,
    'k2_num_stages': 1,
}
TUNABLE_CHOICES = {
    'k0_XBLOCK': [128, 256, 512, 1024, 2048, 4096],
    'k0_num_warps': [1, 2, 4, 8, 16],
    'k0_num_stages': [1, 2, 3, 4],
    'k1_BLOCK_M': [16, 32, 64, 128, 256],
    'k1_BLOCK_N': [16, 32, 64, 128, 256],
    'k1_BLOCK_K': [16, 32, 64, 128],
    'k1_GROUP_M': [1, 4, 8, 16],
    'k1_num_warps': [1, 2, 4, 8, 16],
    'k1_num_stages': [1, 2, 3, 4],
    'k2_XBLOCK': [128, 256, 512, 1024, 2048, 4096],
    'k2_num_warps': [1, 2, 4, 8, 16],
    'k2_num_stages': [1, 2, 3, 4],
}


@triton.jit
def triton_poi_fused_clone_transpose_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 4194304
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = (xindex % 512)
    x1 = ((xindex // 512) % 16)
    x2 = xindex // 8192
    x3 = xindex
    tmp0 = tl.load(in_ptr0 + (x0 + 512*x2 + 262144*x1), None)
    tl.store(out_ptr0 + (x3), tmp0, None)


@triton.jit
def triton_tem_fused__unsafe_view_clone_mm_t_transpose_1(arg_A, arg_B, out_ptr0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    EVEN_K : tl.constexpr = True
    USE_FAST_ACCUM : tl.constexpr = False
    ACC_TYPE : tl.constexpr = tl.float32
    ALLOW_TF32 : tl.constexpr = False
    INDEX_DTYPE : tl.constexpr = tl.int32
    A = arg_A
    B = arg_B

    M = 8192
    N = 1536
    K = 512
    if M * N == 0:
        # early exit due to zero-size input(s)
        return
    stride_am = 512
    stride_ak = 1
    stride_bk = 1
    stride_bn = 512

    # based on triton.ops.matmul
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N

    # re-order program ID for better L2 performance
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // (group_size)
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if ((stride_am == 1 and stride_ak == M) or (stride_am == K and stride_ak == 1)) and (M >= BLOCK_M and K > 1):
        offs_a_m = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        offs_a_m = rm % M
    if ((stride_bk == 1 and stride_bn == K) or (stride_bk == N and stride_bn == 1)) and (N >= BLOCK_N and K > 1):
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)

    for k_idx in range(0, tl.cdiv(K, BLOCK_K)):

        a_k_idx_vals = offs_k[None, :] + (k_idx * BLOCK_K)
        b_k_idx_vals = offs_k[:, None] + (k_idx * BLOCK_K)

        idx_m = offs_a_m[:, None]
        idx_n = a_k_idx_vals
        xindex = idx_n + 512*idx_m
        a = tl.load(A + (xindex))

        idx_m = b_k_idx_vals
        idx_n = offs_b_n[None, :]
        xindex = idx_n + 1536*idx_m
        b = tl.load(B + ((tl.broadcast_to(idx_m + 512*idx_n, [BLOCK_K, BLOCK_N])).broadcast_to(xindex.shape)))


        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)


    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)

    # inductor generates a suffix
    xindex = idx_n + 1536*idx_m
    tl.store(out_ptr0 + (tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N])), acc, mask)


@triton.jit
def triton_poi_fused__unsafe_view_add_clone_squeeze_transpose_unsqueeze_view_2(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 12582912
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = (xindex % 512)
    x1 = ((xindex // 512) % 8192)
    x2 = xindex // 4194304
    x3 = xindex
    tmp0 = tl.load(in_ptr0 + (x0 + 512*x2 + 1536*x1), None)
    tmp1 = tl.load(in_ptr1 + (x0 + 512*x2), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tl.store(out_ptr0 + (x3), tmp2, None)


def kernel_fn(x, in_proj_weight, in_proj_bias):
    device = x.device
    buf0 = torch.empty_strided((512, 16, 512), (8192, 512, 1), dtype=torch.float32, device=device)
    # [transpose_int, clone_default], Original ATen: [aten.transpose, aten.clone]
    triton_poi_fused_clone_transpose_0[(triton.cdiv(4194304, TUNABLES['k0_XBLOCK']),)](x, buf0, 4194304, XBLOCK=TUNABLES['k0_XBLOCK'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    buf1 = torch.empty_strided((8192, 1536), (1536, 1), dtype=torch.float32, device=device)
    # [transpose_int, clone_default, _unsafe_view_default, t_default, mm_default], Original ATen: [aten.transpose, aten.clone, aten._unsafe_view, aten.t, aten.mm]
    triton_tem_fused__unsafe_view_clone_mm_t_transpose_1[(triton.cdiv(8192, TUNABLES['k1_BLOCK_M']) * triton.cdiv(1536, TUNABLES['k1_BLOCK_N']), 1, 1)](buf0, in_proj_weight, buf1, BLOCK_M=TUNABLES['k1_BLOCK_M'], BLOCK_N=TUNABLES['k1_BLOCK_N'], BLOCK_K=TUNABLES['k1_BLOCK_K'], GROUP_M=TUNABLES['k1_GROUP_M'], num_warps=TUNABLES['k1_num_warps'], num_stages=TUNABLES['k1_num_stages'])
    buf2 = torch.empty_strided((3, 512, 16, 512), (4194304, 8192, 512, 1), dtype=torch.float32, device=device)
    # [_unsafe_view_default_1, add_tensor, view_default, unsqueeze_default, transpose_int_1, squeeze_dim, clone_default_1], Original ATen: [aten._unsafe_view, aten.add, aten.view, aten.unsqueeze, aten.transpose, aten.squeeze, aten.clone]
    triton_poi_fused__unsafe_view_add_clone_squeeze_transpose_unsqueeze_view_2[(triton.cdiv(12582912, TUNABLES['k2_XBLOCK']),)](buf1, in_proj_bias, buf2, 12582912, XBLOCK=TUNABLES['k2_XBLOCK'], num_warps=TUNABLES['k2_num_warps'], num_stages=TUNABLES['k2_num_stages'])
    return buf2
