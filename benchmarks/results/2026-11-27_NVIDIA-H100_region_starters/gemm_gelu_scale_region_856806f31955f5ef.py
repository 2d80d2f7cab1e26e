"""Region region_856806f31955f5ef: a region of gemm_gelu_scale: addmm -> gelu -> mul; reads weight (4096, 1024) float32, bias (4096,) float32, x (4096, 1024) float32; writes (4096, 4096) float32.

The model's PyTorch source it covers:
    gemm_gelu_scale.py:15 (forward): return F.gelu(self.linear(x)) * 0.5

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

KERNEL_TYPE = "region_856806f31955f5ef"

# The kernels, in launch order:
#   k0: triton_tem_fused_addmm_gelu_mul_t_0
TUNABLES = {
    'k0_BLOCK_M': 128,
    'k0_BLOCK_N': 128,
    'k0_BLOCK_K': 32,
    'k0_GROUP_M': 8,
    'k0_num_warps': 4,
    'k0_num_stages': 3,
}
TUNABLE_CHOICES = {
    'k0_BLOCK_M': [16, 32, 64, 128, 256],
    'k0_BLOCK_N': [16, 32, 64, 128, 256],
    'k0_BLOCK_K': [16, 32, 64, 128],
    'k0_GROUP_M': [1, 4, 8, 16],
    'k0_num_warps': [1, 2, 4, 8, 16],
    'k0_num_stages': [1, 2, 3, 4],
}


@triton.jit
def triton_tem_fused_addmm_gelu_mul_t_0(arg_A, arg_B, in_ptr2, out_ptr1, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    EVEN_K : tl.constexpr = True
    USE_FAST_ACCUM : tl.constexpr = False
    ACC_TYPE : tl.constexpr = tl.float32
    ALLOW_TF32 : tl.constexpr = False
    INDEX_DTYPE : tl.constexpr = tl.int32
    A = arg_A
    B = arg_B

    M = 4096
    N = 4096
    K = 1024
    if M * N == 0:
        # early exit due to zero-size input(s)
        return
    stride_am = 1024
    stride_ak = 1
    stride_bk = 1
    stride_bn = 1024

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
        xindex = idx_n + 1024*idx_m
        a = tl.load(A + (xindex))

        idx_m = b_k_idx_vals
        idx_n = offs_b_n[None, :]
        xindex = idx_n + 4096*idx_m
        b = tl.load(B + ((tl.broadcast_to(idx_m + 1024*idx_n, [BLOCK_K, BLOCK_N])).broadcast_to(xindex.shape)))


        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)


    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)

    # inductor generates a suffix
    xindex = idx_n + 4096*idx_m
    tmp0 = tl.load(in_ptr2 + (tl.broadcast_to(idx_n, [BLOCK_M, BLOCK_N])), mask, eviction_policy='evict_last')
    tmp1 = tmp0 + acc
    tmp2 = tl.full([1], 0.5, tl.float32)
    tmp3 = tmp1 * tmp2
    tmp4 = tl.full([1], 0.7071067811865476, tl.float32)
    tmp5 = tmp1 * tmp4
    tmp6 = libdevice.erf(tmp5)
    tmp7 = tl.full([1], 1.0, tl.float32)
    tmp8 = tmp6 + tmp7
    tmp9 = tmp3 * tmp8
    tmp10 = tmp9 * tmp2
    tl.store(out_ptr1 + (tl.broadcast_to(idx_n + 4096*idx_m, [BLOCK_M, BLOCK_N])), tmp10, mask)


def kernel_fn(weight, bias, x):
    device = weight.device
    buf1 = torch.empty_strided((4096, 4096), (4096, 1), dtype=torch.float32, device=device)
    # [t_default, addmm_default, gelu_default, mul_tensor], Original ATen: [aten.t, aten.addmm, aten.gelu, aten.mul]
    triton_tem_fused_addmm_gelu_mul_t_0[(triton.cdiv(4096, TUNABLES['k0_BLOCK_M']) * triton.cdiv(4096, TUNABLES['k0_BLOCK_N']), 1, 1)](x, weight, bias, buf1, BLOCK_M=TUNABLES['k0_BLOCK_M'], BLOCK_N=TUNABLES['k0_BLOCK_N'], BLOCK_K=TUNABLES['k0_BLOCK_K'], GROUP_M=TUNABLES['k0_GROUP_M'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    return buf1
