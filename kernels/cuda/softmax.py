"""Softmax starter in CUDA C++: softmax over the last dimension, statistics in float32.

A group of threads takes one row: a warp per row for rows up to WARP_ROW_MAX_N elements
(ROWS_PER_BLOCK rows to a block, so short rows still fill the machine), else the whole block of
BLOCK_THREADS threads. Where the row fits in the group's registers (up to MAX_PACKS 16-byte
pieces per thread, fewer where the block's registers hold fewer: fitting_packs) it is read from
memory once: the group takes the row's max, then each element's exp(x - max), their sum, and the
write. Longer rows take three passes over memory (max, sum, write; the later ones mostly from
the cache). Loads and stores move 16 bytes at a time where the row, its stride and the pointers
allow, otherwise one element at a time (the looping kernel). Rows of -inf entries (an attention
mask) give NaN as in PyTorch; a -inf entry in a row with a finite max gives 0.

How a thread keeps its pieces of the row (two tunables):
- PACKED_ROW off: as floats, each element turned into exp(x - max) in place (one exponential per
  element). PACKED_ROW on (16-bit types; float32 rows are floats either way): as loaded, half the
  registers, so twice the rows are in flight per SM; each exponential is computed twice, for the
  sum and for the output, both still float32 (never rounded to 16 bits).
- LOCAL_MAX on: a thread shifts its exponentials by the max of its own elements instead of the
  row's, so it starts them as soon as its own loads land, with no barrier before them (they overlap
  other warps' loads); the group takes the row's max and the sum after them, each thread's sum
  scaled by exp(its max - the row's max). LOCAL_MAX off: the row's max first, then the exponentials.
Both default off (the layout measured on an H100) until a GPU times them: benchmarks/cuda_check.py sweep.
"""

import torch

from autokernel.judge.cuda_build import load_cuda

KERNEL_TYPE = "softmax"
BACKEND = "cuda"

# Tunable parameters (the built-in search agent edits this dict and nothing else); each becomes a
# #define in CUDA_SOURCE, so a change is a new build.
# BLOCK_THREADS: threads per row for rows longer than WARP_ROW_MAX_N.
# ROWS_PER_BLOCK: rows (one warp each) per block for short rows.
# MAX_PACKS: 16-byte pieces of the row a thread holds in registers (longer rows loop over memory).
# PACKED_ROW, LOCAL_MAX: how a thread keeps and shifts its pieces (the docstring above). Both on by default: on an
# H100 (2026-11-27, fp16, median of 5) they took 4096 x 2048 from 0.94 to 0.97 of copy and 256 x 32768 from 0.78
# to 0.95 (benchmarks/results/2026-11-27_NVIDIA-H100_cuda_softmax/).
TUNABLES = {"BLOCK_THREADS": 512, "WARP_ROW_MAX_N": 2048, "ROWS_PER_BLOCK": 8, "MAX_PACKS": 8,
            "PACKED_ROW": True, "LOCAL_MAX": True}
# The values the search agent may try for each tunable. Every combination builds: MAX_PACKS is a
# cap, and fitting_packs lowers it where a thread's registers hold fewer pieces.
TUNABLE_CHOICES = {"BLOCK_THREADS": [128, 256, 512, 1024], "WARP_ROW_MAX_N": [0, 256, 512, 1024, 2048],
                   "ROWS_PER_BLOCK": [1, 2, 4, 8, 16], "MAX_PACKS": [2, 4, 8, 16],
                   "PACKED_ROW": [False, True], "LOCAL_MAX": [False, True]}

CUDA_SOURCE = r"""
// The device code comes first and compiles on its own (no torch headers: NVRTC compiles it for
// benchmarks/cuda_check.py compile); the torch entry point follows, for nvcc only.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>     // CUDART_INF_F, CUDART_MAX_NORMAL_F

namespace {

constexpr int WARP = 32;
constexpr float LOG2E = 1.4426950408889634f;

static_assert(BLOCK_THREADS % WARP == 0 && BLOCK_THREADS >= WARP && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS must be a multiple of 32, from 32 to 1024");
static_assert(ROWS_PER_BLOCK >= 1 && WARP * ROWS_PER_BLOCK <= 1024, "ROWS_PER_BLOCK must be from 1 to 32");
static_assert(MAX_PACKS >= 1 && (MAX_PACKS & (MAX_PACKS - 1)) == 0, "MAX_PACKS must be a power of two");

// 16 bytes of elements, loaded or stored as one vector.
template <typename T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

// (torch's build defines __CUDA_NO_HALF_CONVERSIONS__: conversions are spelled out)
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(double v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
// The first (or `high`: second) 16-bit element of a register holding two, as a float (bfloat16: exact by a shift).
template <typename T> __device__ __forceinline__ float unpack16(unsigned word, bool high);
template <> __device__ __forceinline__ float unpack16<__half>(unsigned word, bool high) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(high ? word >> 16 : word & 0xffffu)));
}
template <> __device__ __forceinline__ float unpack16<__nv_bfloat16>(unsigned word, bool high) {
  return __uint_as_float(high ? word & 0xffff0000u : word << 16);
}

// Threads per block of a kernel whose groups are GROUP threads: a warp per row packs ROWS_PER_BLOCK rows.
template <int GROUP> constexpr int block_threads = GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP;

// Registers. A block's threads share the SM's 65536 and ptxas gives a thread at most 255, so a thread of a block
// of N threads has min(255, 65536 / N). A thread needs about row_registers for its PACKS 16-byte pieces of the
// row: 4 each as loaded, 16 / sizeof(T) more kept as floats from 16-bit types (the loaded words are live beside
// the floats while the loads are in flight), about 2 more each (addresses, conditions, values in flight) and
// ROW_OTHER_REGISTERS. The register kernel takes at most the pieces that fit (a power of two up to MAX_PACKS;
// a longer row takes the looping kernel instead of spilling), and is built for as many blocks per SM as that
// estimate allows (an SM runs at most 2048 threads in 32 blocks): __launch_bounds__ holds ptxas to 65536 /
// (threads * blocks) registers; left to itself, ptxas spilled a few bytes of small blocks' kernels to local
// memory to fit more blocks than that. (ptxas -v for sm_90a, CUDA 12.9 and 13.0: no spill in any float16,
// bfloat16 or float32 instance of any choice: `python benchmarks/cuda_check.py compile --kernel
// kernels/cuda/softmax.py --all`.) So a 64 KB row (32768 x 16 bits) over 512 threads, 8 pieces each, is
// 8 * 14 + 16 = 128 registers estimated (ptxas: 110) kept as floats: one block, one row, per SM, and 256 rows take
// two waves on 132 SMs; kept packed, 8 * 6 + 16 = 64 (ptxas: 56): two blocks (57344 of the 65536 registers), one
// wave. A 2048-wide row over a warp is 8 pieces too: as floats 109 registers, 2 blocks of 8 rows per SM, and 4096
// rows take two waves; packed 54, 4 blocks (32 rows per SM, 4224 on the GPU), one wave.
constexpr int ROW_OTHER_REGISTERS = 16;
template <typename T> __host__ __device__ constexpr bool kept_packed() { return PACKED_ROW && sizeof(T) == 2; }
template <typename T> __host__ __device__ constexpr int row_registers(int packs) {
  return packs * (4 + (kept_packed<T>() || sizeof(T) == 4 ? 0 : 16 / sizeof(T)) + 2) + ROW_OTHER_REGISTERS;
}
__host__ __device__ constexpr int clamped(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
template <typename T, int GROUP> __host__ __device__ constexpr int fitting_packs() {
  int packs = MAX_PACKS;
  while (packs > 1 && row_registers<T>(packs) > clamped(65536 / block_threads<GROUP>, 1, 255)) packs /= 2;
  return packs;
}
template <typename T, int GROUP, int PACKS> constexpr int regs_blocks_per_sm = clamped(
    65536 / (block_threads<GROUP> * row_registers<T>(PACKS)), 1, clamped(2048 / block_threads<GROUP>, 1, 32));

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The max (or sum) over a group of GROUP threads (a warp, or the whole block); every thread gets it.
// Each reduction has its own scratch, so the second never overwrites what a slow warp still reads.
template <int GROUP>
__device__ __forceinline__ float group_max(float v, float* scratch) {
  v = warp_max(v);
  if constexpr (GROUP > WARP) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_max(lane < GROUP / WARP ? scratch[lane] : -CUDART_INF_F);
  }
  return v;
}
template <int GROUP>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
  v = warp_sum(v);
  if constexpr (GROUP > WARP) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_sum(lane < GROUP / WARP ? scratch[lane] : 0.f);
  }
  return v;
}

// exp(x - max) as one exp2 (max == -inf, a fully masked row, gives NaN as in PyTorch).
__device__ __forceinline__ float exp_shifted(float x, float max) { return exp2f((x - max) * LOG2E); }
// 1 / sum within 2 ulp, inline: IEEE division calls a slow-path routine, and values live across that call went
// to local memory (ptxas -v: a few bytes spilled). The sum is >= 1 wherever the row's max is finite; 1 / 0 is inf.
__device__ __forceinline__ float reciprocal(float sum) { return __fdividef(1.f, sum); }

// A thread's PACKS pieces of its row: as loaded (kept_packed) or as floats.
template <typename T, int PACKS, bool PACKED = kept_packed<T>()> struct RowPieces {
  static constexpr int V = 16 / sizeof(T);
  float v[PACKS][V];
  __device__ __forceinline__ void load(int p, const T* from) {
    const Pack<T> in = *reinterpret_cast<const Pack<T>*>(from);
#pragma unroll
    for (int k = 0; k < V; ++k) v[p][k] = to_float(in.v[k]);
  }
  __device__ __forceinline__ float get(int p, int k) const { return v[p][k]; }
  __device__ __forceinline__ void set(int p, int k, float e) { v[p][k] = e; }
};
template <typename T, int PACKS> struct RowPieces<T, PACKS, true> {      // 16-bit types
  unsigned w[PACKS][4];         // as loaded: two elements to a register
  __device__ __forceinline__ void load(int p, const T* from) {
    const uint4 in = *reinterpret_cast<const uint4*>(from);
    w[p][0] = in.x, w[p][1] = in.y, w[p][2] = in.z, w[p][3] = in.w;
  }
  __device__ __forceinline__ float get(int p, int k) const { return unpack16<T>(w[p][k / 2], k % 2); }
  __device__ __forceinline__ void set(int, int, float) {}     // the exponential is computed again for the output
};

// The row in registers: PACKS 16-byte pieces per thread, read once. Needs 16-byte aligned rows, and the host
// launches it only for rows of at most PACKS * GROUP * V elements.
template <typename T, int GROUP, int PACKS>
__global__ void __launch_bounds__(block_threads<GROUP>, regs_blocks_per_sm<T, GROUP, PACKS>) softmax_regs_kernel(
    const T* __restrict__ x, T* __restrict__ y, long long n_rows, long long n_cols, long long x_stride) {
  __shared__ float max_scratch[WARP], sum_scratch[WARP];
  const long long row = (long long)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  // A whole group leaves together: with GROUP == blockDim.x every row exists, so no __syncthreads is skipped.
  if (row >= n_rows) return;
  constexpr int V = 16 / sizeof(T);
  const int t = threadIdx.x % GROUP;
  // Piece p of this thread starts at column (p * GROUP + t) * V; the first `held` lie in the row.
  const int held = t * V < n_cols ? (int)((n_cols - t * V + GROUP * V - 1) / (GROUP * V)) : 0;
  const T* xr = x + row * x_stride + t * V;
  T* yr = y + row * n_cols + t * V;
  RowPieces<T, PACKS> pieces;
  float max = -CUDART_INF_F;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    if (p < held) {
      pieces.load(p, xr + p * GROUP * V);
#pragma unroll
      for (int k = 0; k < V; ++k) max = fmaxf(max, pieces.get(p, k));
    }
  }
  // The exponentials' shift: the row's max; with LOCAL_MAX the thread's own, which needs no barrier first (kept
  // finite: a thread of -inf entries shifts by -FLT_MAX, and its exponentials are 0, not NaN).
  float row_max = LOCAL_MAX ? max : group_max<GROUP>(max, max_scratch);
  const float shift = LOCAL_MAX ? fmaxf(max, -CUDART_MAX_NORMAL_F) : row_max;
  float sum = 0.f;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    if (p < held) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float e = exp_shifted(pieces.get(p, k), shift);
        pieces.set(p, k, e);
        sum += e;
      }
    }
  }
  // LOCAL_MAX: the thread's sum counts at exp(its shift - the row's max): 0 for a thread of -inf entries in a row
  // with a finite max; in a row of -inf entries, exp(inf) scales sums of 0, and 0 * inf gives NaN, as in PyTorch.
  float scale = 1.f;
  if constexpr (LOCAL_MAX) {
    row_max = group_max<GROUP>(max, max_scratch);
    scale = exp_shifted(shift, row_max);
  }
  const float inv_sum = reciprocal(group_sum<GROUP>(sum * scale, sum_scratch));
  const float kept_scale = scale * inv_sum;        // for exponentials kept as floats (shifted by `shift`)
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    if (p < held) {
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k)
        out.v[k] = from_float<T>(kept_packed<T>() ? exp_shifted(pieces.get(p, k), row_max) * inv_sum
                                                  : pieces.get(p, k) * kept_scale);
      *reinterpret_cast<Pack<T>*>(yr + p * GROUP * V) = out;
    }
  }
}

// Rows too long for the registers, or not 16-byte aligned: max, sum and write, each a pass over the row.
template <typename T, int GROUP>
__global__ void __launch_bounds__(block_threads<GROUP>) softmax_loop_kernel(
    const T* __restrict__ x, T* __restrict__ y, long long n_rows, long long n_cols, long long x_stride,
    bool vectorized) {
  __shared__ float max_scratch[WARP], sum_scratch[WARP];
  const long long row = (long long)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  if (row >= n_rows) return;
  const int t = threadIdx.x % GROUP;
  const T* xr = x + row * x_stride;
  T* yr = y + row * n_cols;
  constexpr int V = 16 / sizeof(T);
  const long long step = vectorized ? (long long)GROUP * V : GROUP, first = vectorized ? (long long)t * V : t;
  float max = -CUDART_INF_F;
#pragma unroll 4
  for (long long c = first; c < n_cols; c += step) {
    if (vectorized) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
      for (int k = 0; k < V; ++k) max = fmaxf(max, to_float(in.v[k]));
    } else {
      max = fmaxf(max, to_float(xr[c]));
    }
  }
  max = group_max<GROUP>(max, max_scratch);
  float sum = 0.f;
#pragma unroll 4
  for (long long c = first; c < n_cols; c += step) {
    if (vectorized) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
      for (int k = 0; k < V; ++k) sum += exp_shifted(to_float(in.v[k]), max);
    } else {
      sum += exp_shifted(to_float(xr[c]), max);
    }
  }
  const float inv_sum = reciprocal(group_sum<GROUP>(sum, sum_scratch));
  for (long long c = first; c < n_cols; c += step) {
    if (vectorized) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
      Pack<T> out;
      for (int k = 0; k < V; ++k) out.v[k] = from_float<T>(exp_shifted(to_float(in.v[k]), max) * inv_sum);
      *reinterpret_cast<Pack<T>*>(yr + c) = out;
    } else {
      yr[c] = from_float<T>(exp_shifted(to_float(xr[c]), max) * inv_sum);
    }
  }
}

}  // namespace

#ifndef __CUDACC_RTC__
#include <torch/types.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

namespace {

// The register kernel with the fewest pieces per thread (a power of two up to fitting_packs) that hold the row.
template <typename T, int GROUP, int PACKS>
void launch_regs(int64_t packs_needed, unsigned blocks, cudaStream_t stream, const T* x, T* y, int64_t n_rows,
                 int64_t n_cols, int64_t x_stride) {
  if constexpr (PACKS < fitting_packs<T, GROUP>()) {
    if (packs_needed > PACKS)
      return launch_regs<T, GROUP, PACKS * 2>(packs_needed, blocks, stream, x, y, n_rows, n_cols, x_stride);
  }
  softmax_regs_kernel<T, GROUP, PACKS><<<blocks, block_threads<GROUP>, 0, stream>>>(x, y, n_rows, n_cols, x_stride);
}

template <typename T, int GROUP>
void launch_rows(bool vectorized, cudaStream_t stream, const T* x, T* y, int64_t n_rows, int64_t n_cols,
                 int64_t x_stride) {
  constexpr int V = 16 / sizeof(T), ROWS = block_threads<GROUP> / GROUP;
  const int64_t blocks = (n_rows + ROWS - 1) / ROWS;
  TORCH_CHECK(blocks < (1LL << 31), "softmax_rows: too many rows");
  const int64_t packs_needed = (n_cols + (int64_t)GROUP * V - 1) / ((int64_t)GROUP * V);
  if (vectorized && packs_needed <= fitting_packs<T, GROUP>())
    launch_regs<T, GROUP, 1>(packs_needed, (unsigned)blocks, stream, x, y, n_rows, n_cols, x_stride);
  else
    softmax_loop_kernel<T, GROUP><<<(unsigned)blocks, block_threads<GROUP>, 0, stream>>>(x, y, n_rows, n_cols,
                                                                                         x_stride, vectorized);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// T is the kernels' element type (__half, not torch's c10::Half: the kernels NVRTC checks are the ones launched).
template <typename T>
void softmax_typed(const torch::Tensor& x, torch::Tensor& y, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const int64_t n_rows = x.size(0), n_cols = x.size(1);
  const bool vectorized = n_cols % V == 0 && x.stride(0) % V == 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr());
  const auto* xp = reinterpret_cast<const T*>(x.data_ptr());
  auto* yp = reinterpret_cast<T*>(y.data_ptr());
  // A warp per row while the row fits a warp's registers (or cannot be vectorized anyway).
  const bool warp_fits = !vectorized || n_cols <= (int64_t)WARP * V * fitting_packs<T, WARP>();
  if (n_cols <= WARP_ROW_MAX_N && warp_fits)
    launch_rows<T, WARP>(vectorized, stream, xp, yp, n_rows, n_cols, x.stride(0));
  else
    launch_rows<T, BLOCK_THREADS>(vectorized, stream, xp, yp, n_rows, n_cols, x.stride(0));
}

}  // namespace

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.stride(1) == 1, "softmax_rows: x must be a CUDA (rows, N) tensor "
              "with contiguous rows");
  auto y = torch::empty({x.size(0), x.size(1)}, x.options());
  if (y.numel() == 0) return y;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  switch (x.scalar_type()) {
    case at::ScalarType::Half: softmax_typed<__half>(x, y, stream); break;
    case at::ScalarType::BFloat16: softmax_typed<__nv_bfloat16>(x, y, stream); break;
    case at::ScalarType::Float: softmax_typed<float>(x, y, stream); break;
    case at::ScalarType::Double: softmax_typed<double>(x, y, stream); break;
    default: TORCH_CHECK(false, "softmax_rows: float16, bfloat16, float32 or float64 only");
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
#endif  // __CUDACC_RTC__
"""

_ext = load_cuda(CUDA_SOURCE, ["softmax_rows"], TUNABLES)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    n_cols = x.shape[-1] if x.dim() > 0 else 1
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    return _ext.softmax_rows(x2d).reshape(x.shape)
