"""Probe: can float32 GEMMs at PyTorch's default "highest" precision beat cuBLAS's SGEMM in Triton?

Question (issue 11's bar: every KernelBench float32 GEMM shape >= 0.9x eager). Triton's IEEE path
(CUDA-core FMAs) reached 0.83x cuBLAS at 4096^3 and tf32x3 only 0.69x (docs/notes/model_shapes.md).
Hypothesis: tf32 (and so tf32x3) was slow because B was loaded N-major: Hopper's wgmma takes 32-bit
operands from shared memory only K-major, so Triton fell back to the Ampere mma.sync path. With B
transposed to (N, K) first (one extra pass over B), tf32x3 should run on wgmma: expected ~2x cuBLAS's
SGEMM at 4096^3, with an error against a float64 product no larger than cuBLAS's own.

Prints, per shape and variant: median whole-call time (do_bench, L2 flushed), TFLOP/s, ratio to
cuBLAS SGEMM, and max |C - C64| over the RMS of C64, beside cuBLAS's own error.
Run: python benchmarks/kernels.py fp32-probe [--quick]
"""

import argparse
import itertools
import time

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tile(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of this program, GROUP_M tile rows per L2 group."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    first_m = pid // (GROUP_M * grid_n) * GROUP_M
    size_m = min(tl.cdiv(M, BM) - first_m, GROUP_M)
    return first_m + (pid % (GROUP_M * grid_n)) % size_m, (pid % (GROUP_M * grid_n)) // size_m


@triton.jit
def _gemm_ptr(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, k_per_split,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
              PRECISION: tl.constexpr):
    pid_m, pid_n = _tile(M, N, BM, BN, GROUP_M)
    split = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    k0 = split * k_per_split
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(k0, min(k0 + k_per_split, K), BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    c = c_ptr + split * M * N + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _gemm_tma(a_desc, bt_desc, c_ptr, M, N, K, k_per_split,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
              PRECISION: tl.constexpr):
    pid_m, pid_n = _tile(M, N, BM, BN, GROUP_M)
    split = tl.program_id(1)
    k0 = split * k_per_split
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(k0, min(k0 + k_per_split, K), BK):
        a = a_desc.load([pid_m * BM, k])
        b = bt_desc.load([pid_n * BN, k])
        acc = tl.dot(a, b.T, acc, input_precision=PRECISION)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    c = c_ptr + split * M * N + rm[:, None] * N + rn[None, :]
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b, cfg):
    """One whole call: the optional transpose of B, the GEMM, and the split-K sum."""
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK, warps, stages, prec, layout, split = cfg
    k_per = triton.cdiv(triton.cdiv(K, split), BK) * BK
    splits = triton.cdiv(K, k_per)
    out = torch.empty((splits, M, N) if splits > 1 else (M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN), splits)
    if layout == "row":
        _gemm_ptr[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1, k_per,
                        BM=BM, BN=BN, BK=BK, GROUP_M=8, PRECISION=prec, num_warps=warps, num_stages=stages)
    else:
        bt = b.t().contiguous()
        if layout == "kmajor":
            _gemm_ptr[grid](a, bt, out, M, N, K, a.stride(0), a.stride(1), bt.stride(1), bt.stride(0), N, 1, k_per,
                            BM=BM, BN=BN, BK=BK, GROUP_M=8, PRECISION=prec, num_warps=warps, num_stages=stages)
        else:  # tma
            ad = TensorDescriptor.from_tensor(a, [BM, BK])
            bd = TensorDescriptor.from_tensor(bt, [BN, BK])
            _gemm_tma[grid](ad, bd, out, M, N, K, k_per, BM=BM, BN=BN, BK=BK, GROUP_M=8, PRECISION=prec,
                            num_warps=warps, num_stages=stages)
    return out.sum(0) if splits > 1 else out


def err(c, ref):
    return ((c.double() - ref).abs().max() / ref.pow(2).mean().sqrt()).item()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true")


def main(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"precision {torch.get_float32_matmul_precision()}")
    shapes = [(4096, 4096, 4096), (2048, 4096, 8192), (2048, 8192, 4096), (256, 256, 524288), (8205, 5921, 2948)]
    if args.quick:
        shapes = shapes[:1]
    t_start = time.time()
    for (M, N, K) in shapes:
        a = torch.randn(M, K, device="cuda")
        b = torch.randn(K, N, device="cuda")
        ref = a.double() @ b.double()
        flop = 2 * M * N * K
        t_cub = triton.testing.do_bench(lambda: a @ b)
        e_cub = err(a @ b, ref)
        print(f"\n== M={M} N={N} K={K}: cuBLAS highest {t_cub * 1e3:.1f} us {flop / t_cub / 1e9:.1f} TFLOP/s err {e_cub:.2e}")
        split = 32 if K >= 100000 else 1
        cfgs = []
        for prec, layout in itertools.product(["tf32x3", "tf32"], ["row", "kmajor", "tma"]):
            for BM, BN, BK, w, s in [(128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (128, 128, 32, 4, 4), (128, 128, 64, 8, 3)]:
                cfgs.append((BM, BN, BK, w, s, prec, layout, split))
        for BM, BN, BK, w, s in [(128, 128, 32, 8, 3), (128, 128, 16, 8, 3), (128, 128, 32, 8, 2), (64, 128, 32, 4, 3),
                                 (128, 64, 32, 4, 3), (128, 128, 16, 4, 4)]:
            cfgs.append((BM, BN, BK, w, s, "ieee", "row", split))
        for cfg in cfgs:
            if time.time() - t_start > 420:
                print("  (time budget reached)")
                return
            try:
                c = run(a, b, cfg)
                e = err(c, ref)
                t = triton.testing.do_bench(lambda: run(a, b, cfg))
                print(f"  {cfg[5]:7s} {cfg[6]:6s} {cfg[0]}x{cfg[1]}x{cfg[2]} w{cfg[3]} s{cfg[4]} split{cfg[7]}: "
                      f"{t * 1e3:8.1f} us {flop / t / 1e9:6.1f} TFLOP/s {t_cub / t:5.2f}x cuBLAS err {e:.2e} ({e / e_cub:.2f}x cuBLAS's)")
            except Exception as exc:  # a config that does not compile or fit is a result too
                print(f"  {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")

