"""Matmul starter in CUDA C++: C = A @ B, float32 accumulation, for float16, bfloat16 and float32.

float16 and bfloat16 on Hopper (an sm_90 GPU, built for sm_90a: cuda_build.sm90a_flags) use its
asynchronous tensor-core pipeline. Each block is persistent: one per SM, it walks the C tiles
blockIdx.x, blockIdx.x + gridDim.x, ... (numbered in GROUP_M groups for L2). Its first warpgroup
(128 threads) is the producer: one thread issues TMA copies (cp.async.bulk.tensor) of A's
WG_BLOCK_M x 64 tile and B's 64 x WG_BLOCK_N tile into one of WG_STAGES shared buffers, and the
copies signal the buffer's "full" mbarrier with their byte count. The WG_CONSUMERS other
warpgroups wait on it; each multiplies its WG_BLOCK_M / WG_CONSUMERS rows by the whole B tile with
wgmma.mma_async m64nNk16 (N = WG_BLOCK_N), from shared memory into float32 registers, then
arrives on the buffer's "empty" mbarrier for the producer to refill it. The producer runs up to
WG_STAGES K steps ahead, across tiles too, so the next tile's loads land while the consumers
store this one's C from registers. setmaxnreg moves registers from the producer to the
consumers' accumulators. TMA writes the tiles in the 128-byte swizzle that wgmma's descriptors
name (a 64-value row is 128 bytes: no bank conflicts); B keeps its (K, N) row-major layout, which
wgmma reads as "N-major" (its transpose bit). TMA reads zeros outside A and B; C's stores are
predicated.

Elsewhere (and for K = 0) they use mma.sync m16n8k16: a TC_BLOCK_M x TC_BLOCK_N tile of C per
block, split among TC_WARPS_M x TC_WARPS_N warps; TC_BLOCK_K-wide tiles of A and B stream into
TC_STAGES shared buffers through cp.async (whose src-size zero-fills what lies past M, N, K), and
ldmatrix moves 16 x 16 pieces to registers. Shared rows are padded by 16 bytes: ldmatrix's eight
rows fall in different banks.

float32 runs on the CUDA cores in IEEE float32 (PyTorch's default "highest" precision; correct,
though slower than cuBLAS's TF32, when TF32 is allowed): a 128 x 128 tile per 256 threads, 8 x 8
outputs per thread, A transposed in shared memory so each thread reads its rows as float4, two
shared buffers: the next K step loads into registers while this one is multiplied.

TMA and cp.async need rows that start 16-byte aligned: an operand whose row step is not a multiple
of 16 bytes, or whose rows are not contiguous (a transposed view), is first copied into padded
rows (the padding is never read).
"""

import torch

from autokernel.judge.cuda_build import load_cuda, sm90a_flags

KERNEL_TYPE = "matmul"
BACKEND = "cuda"

# Tunable parameters (the built-in search agent edits this dict and nothing else); each becomes a
# #define in CUDA_SOURCE, so a change is a new build. WG_*: the Hopper kernel's block tile, consumer
# warpgroups and shared buffers (its K step is 64: one 128-byte swizzle row); TC_*: the mma.sync
# kernel's block tile, warps along M and N, K step and pipeline depth; SIMT_BLOCK_K: the float32
# kernel's K step; GROUP_M: tile rows per L2 group.
TUNABLES = {"WG_BLOCK_M": 128, "WG_BLOCK_N": 256, "WG_CONSUMERS": 2, "WG_STAGES": 4,
            "TC_BLOCK_M": 128, "TC_BLOCK_N": 128, "TC_BLOCK_K": 32, "TC_WARPS_M": 2, "TC_WARPS_N": 4,
            "TC_STAGES": 4, "SIMT_BLOCK_K": 8, "GROUP_M": 8}
# The values the search agent may try for each tunable (CUDA_SOURCE's static_asserts reject the
# combinations that do not fit: more than 128 accumulators per thread, or 227 KB of shared memory).
TUNABLE_CHOICES = {"WG_BLOCK_M": [128, 256], "WG_BLOCK_N": [128, 256], "WG_CONSUMERS": [1, 2],
                   "WG_STAGES": [2, 3, 4, 5, 6],
                   "TC_BLOCK_M": [64, 128, 256], "TC_BLOCK_N": [64, 128, 256], "TC_BLOCK_K": [32, 64],
                   "TC_WARPS_M": [1, 2, 4], "TC_WARPS_N": [1, 2, 4], "TC_STAGES": [2, 3, 4, 5],
                   "SIMT_BLOCK_K": [8, 16], "GROUP_M": [1, 4, 8, 16]}

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

CUDA_SOURCE = r"""
// The device code comes first and compiles on its own (no torch headers: NVRTC compiles it for
// benchmarks/cuda_check.py compile); the torch entry point follows, for nvcc only.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace {

constexpr int TC_THREADS = TC_WARPS_M * TC_WARPS_N * 32;
constexpr int TC_WARP_M = TC_BLOCK_M / TC_WARPS_M;      // a warp's tile of C
constexpr int TC_WARP_N = TC_BLOCK_N / TC_WARPS_N;
constexpr int TC_MI = TC_WARP_M / 16;                   // m16 pieces per warp
constexpr int TC_NI = TC_WARP_N / 8;                    // n8 pieces per warp
constexpr int PAD = 8;                                  // 16 bytes of 16-bit elements
constexpr int A_LD = TC_BLOCK_K + PAD;                  // shared row lengths, in elements
constexpr int B_LD = TC_BLOCK_N + PAD;
constexpr int A_STAGE = TC_BLOCK_M * A_LD;
constexpr int B_STAGE = TC_BLOCK_K * B_LD;
constexpr int TC_SMEM_BYTES = TC_STAGES * (A_STAGE + B_STAGE) * 2;
static_assert(TC_WARP_M % 16 == 0 && TC_WARP_N % 16 == 0,
              "each warp's tile must be a multiple of 16 x 16: TC_BLOCK_M / TC_WARPS_M and TC_BLOCK_N / TC_WARPS_N");
static_assert(TC_BLOCK_K % 16 == 0 && TC_STAGES >= 2, "TC_BLOCK_K must be a multiple of 16, TC_STAGES at least 2");
static_assert(TC_SMEM_BYTES <= 227 * 1024, "the tiles' shared memory exceeds 227 KB: fewer stages or smaller tiles");

constexpr int SIMT_BM = 128, SIMT_BN = 128, SIMT_THREADS = 256;
constexpr int SIMT_LD = SIMT_BM + 4;                    // padded rows: float4-aligned, fewer bank conflicts
static_assert(SIMT_BLOCK_K % 4 == 0, "SIMT_BLOCK_K must be a multiple of 4");

template <typename T> constexpr bool is_bf16 = false;
template <> constexpr bool is_bf16<__nv_bfloat16> = true;

// (tile row, tile column) of tile `id`: GROUP_M consecutive tiles go down one tile column, so tiles
// computed at the same time share A's rows and B's columns in L2.
__device__ __forceinline__ void grouped_tile(int id, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int per_group = GROUP_M * tiles_n, first_row = (id / per_group) * GROUP_M;
  const int rows = min(tiles_m - first_row, GROUP_M);
  tile_m = first_row + (id % per_group) % rows;
  tile_n = (id % per_group) / rows;
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Copies `bytes` (0..16) from global to shared memory and zero-fills the rest of the 16.
__device__ __forceinline__ void cp_async16(void* smem, const void* global, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_address(smem)), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// How many of a 16-byte piece's bytes lie inside the matrix, `remaining` elements from its edge.
__device__ __forceinline__ int bytes_inside(long long remaining, int element_size) {
  return remaining <= 0 ? 0 : remaining * element_size >= 16 ? 16 : (int)remaining * element_size;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(smem)));
}

// d += a (16 x 16, row-major fragment) * b (16 x 8, column-major fragment), float32 accumulators.
#define MMA16816(TYPE)                                                                                   \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0, %1, %2, %3}, "                  \
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                                  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (is_bf16<T>) MMA16816("bf16"); else MMA16816("f16");
}

// (torch's build defines __CUDA_NO_HALF_CONVERSIONS__: conversions are spelled out)
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> struct alignas(2 * sizeof(T)) Pair { T v[2]; };

// Stores C[gm][gn] and C[gm][gn + 1] (those inside M x N); `pairs`: both in one 4-byte store when inside.
template <typename T>
__device__ __forceinline__ void store_pair(T* C, long long ldc, int M, int N, int gm, int gn, float x, float y,
                                           bool pairs) {
  if (gm >= M || gn >= N) return;
  T* out = C + gm * ldc + gn;
  if (pairs && gn + 1 < N) {
    *reinterpret_cast<Pair<T>*>(out) = Pair<T>{{from_float<T>(x), from_float<T>(y)}};
  } else {
    out[0] = from_float<T>(x);
    if (gn + 1 < N) out[1] = from_float<T>(y);
  }
}

// C (M x N, row step ldc) = A (M x K, row step lda) @ B (K x N, row step ldb); rows 16-byte aligned.
template <typename T>
__global__ void __launch_bounds__(TC_THREADS) gemm_tensor_core_kernel(
    const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K,
    long long lda, long long ldb, long long ldc) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* As = reinterpret_cast<T*>(smem_bytes);
  T* Bs = As + TC_STAGES * A_STAGE;
  int tile_m, tile_n;
  grouped_tile(blockIdx.x, (M + TC_BLOCK_M - 1) / TC_BLOCK_M, (N + TC_BLOCK_N - 1) / TC_BLOCK_N, tile_m, tile_n);
  const int m0 = tile_m * TC_BLOCK_M, n0 = tile_n * TC_BLOCK_N;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = (warp / TC_WARPS_N) * TC_WARP_M, warp_n = (warp % TC_WARPS_N) * TC_WARP_N;
  const int k_tiles = (K + TC_BLOCK_K - 1) / TC_BLOCK_K;

  auto load_stage = [&](int stage, int k_tile) {
    const int k0 = k_tile * TC_BLOCK_K;
    T* a_dst = As + stage * A_STAGE;
    T* b_dst = Bs + stage * B_STAGE;
    for (int c = tid; c < TC_BLOCK_M * TC_BLOCK_K / 8; c += TC_THREADS) {
      const int row = c / (TC_BLOCK_K / 8), col = (c % (TC_BLOCK_K / 8)) * 8;
      const int gm = m0 + row, gk = k0 + col;
      const int bytes = gm < M ? bytes_inside(K - gk, sizeof(T)) : 0;
      cp_async16(a_dst + row * A_LD + col, bytes ? A + gm * lda + gk : A, bytes);
    }
    for (int c = tid; c < TC_BLOCK_K * TC_BLOCK_N / 8; c += TC_THREADS) {
      const int row = c / (TC_BLOCK_N / 8), col = (c % (TC_BLOCK_N / 8)) * 8;
      const int gk = k0 + row, gn = n0 + col;
      const int bytes = gk < K ? bytes_inside(N - gn, sizeof(T)) : 0;
      cp_async16(b_dst + row * B_LD + col, bytes ? B + gk * ldb + gn : B, bytes);
    }
  };

  float acc[TC_MI][TC_NI][4] = {};

  // Prologue: the first TC_STAGES - 1 K steps in flight (one commit group each, empty past the end).
#pragma unroll
  for (int s = 0; s < TC_STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<TC_STAGES - 2>();     // step kt has landed (for this thread) ...
    __syncthreads();                    // ... for every thread, and step kt - 1's buffer is free
    const int next = kt + TC_STAGES - 1;
    if (next < k_tiles) load_stage(next % TC_STAGES, next);
    cp_async_commit();
    const T* a_tile = As + (kt % TC_STAGES) * A_STAGE;
    const T* b_tile = Bs + (kt % TC_STAGES) * B_STAGE;
#pragma unroll
    for (int kk = 0; kk < TC_BLOCK_K; kk += 16) {
      unsigned a[TC_MI][4], b[TC_NI][2];
#pragma unroll
      for (int i = 0; i < TC_MI; ++i)       // lanes 0-15: rows 0-15 at column kk; 16-31: at kk + 8
        ldmatrix_x4(a[i], a_tile + (warp_m + i * 16 + lane % 16) * A_LD + kk + (lane / 16) * 8);
#pragma unroll
      for (int j = 0; j < TC_NI; j += 2) {  // two n8 pieces: lanes 0-15 rows kk..kk+15 at n, 16-31 at n + 8
        unsigned r[4];
        ldmatrix_x4_trans(r, b_tile + (kk + lane % 16) * B_LD + warp_n + j * 8 + (lane / 16) * 8);
        b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < TC_MI; ++i)
#pragma unroll
        for (int j = 0; j < TC_NI; ++j) mma16816<T>(acc[i][j], a[i], b[j][0], b[j][1]);
    }
  }
  cp_async_wait<0>();

  // Accumulator piece (i, j): lane holds rows lane / 4 and lane / 4 + 8, columns 2 * (lane % 4) + {0, 1}.
  const bool pairs = ldc % 2 == 0 && reinterpret_cast<unsigned long long>(C) % 4 == 0;   // 4-byte aligned pairs
#pragma unroll
  for (int i = 0; i < TC_MI; ++i)
#pragma unroll
    for (int j = 0; j < TC_NI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair(C, ldc, M, N, m0 + warp_m + i * 16 + lane / 4 + h * 8, n0 + warp_n + j * 8 + (lane % 4) * 2,
                   acc[i][j][h * 2], acc[i][j][h * 2 + 1], pairs);
}

// IEEE float32 on the CUDA cores; thread (ty, tx) of a 16 x 16 grid owns rows ty*4 + {0..3} and 64 + ty*4 + {0..3},
// columns likewise with tx: its float4 reads of shared memory never conflict.
__global__ void __launch_bounds__(SIMT_THREADS) sgemm_kernel(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K,
    long long lda, long long ldb, long long ldc) {
  constexpr int BK = SIMT_BLOCK_K;
  constexpr int A_LOADS = SIMT_BM * BK / 4 / SIMT_THREADS, B_LOADS = BK * SIMT_BN / 4 / SIMT_THREADS;
  __shared__ __align__(16) float As[2][BK][SIMT_LD];     // A transposed: As[k][m]
  __shared__ __align__(16) float Bs[2][BK][SIMT_LD];
  int tile_m, tile_n;
  grouped_tile(blockIdx.x, (M + SIMT_BM - 1) / SIMT_BM, (N + SIMT_BN - 1) / SIMT_BN, tile_m, tile_n);
  const int m0 = tile_m * SIMT_BM, n0 = tile_n * SIMT_BN;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int k_tiles = (K + BK - 1) / BK;
  float4 a_next[A_LOADS], b_next[B_LOADS];

  // Four floats of row `row` from column `col` on (zeros past the matrix), one float4 load where they all lie inside.
  auto load4 = [](const float* rows, long long ld, int row, int rows_in, int col, int cols_in) {
    const float* p = rows + row * ld + col;
    if (row < rows_in && col + 3 < cols_in) return *reinterpret_cast<const float4*>(p);
    const bool in = row < rows_in;
    return make_float4(in && col < cols_in ? p[0] : 0.f, in && col + 1 < cols_in ? p[1] : 0.f,
                       in && col + 2 < cols_in ? p[2] : 0.f, in && col + 3 < cols_in ? p[3] : 0.f);
  };
  auto load_global = [&](int k_tile) {
    const int k0 = k_tile * BK;
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
      const int c = tid + l * SIMT_THREADS;
      a_next[l] = load4(A, lda, m0 + c / (BK / 4), M, k0 + (c % (BK / 4)) * 4, K);
    }
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
      const int c = tid + l * SIMT_THREADS;
      b_next[l] = load4(B, ldb, k0 + c / (SIMT_BN / 4), K, n0 + (c % (SIMT_BN / 4)) * 4, N);
    }
  };
  auto store_shared = [&](int buffer) {
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
      const int c = tid + l * SIMT_THREADS, row = c / (BK / 4), col = (c % (BK / 4)) * 4;
      As[buffer][col + 0][row] = a_next[l].x;
      As[buffer][col + 1][row] = a_next[l].y;
      As[buffer][col + 2][row] = a_next[l].z;
      As[buffer][col + 3][row] = a_next[l].w;
    }
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
      const int c = tid + l * SIMT_THREADS, row = c / (SIMT_BN / 4), col = (c % (SIMT_BN / 4)) * 4;
      *reinterpret_cast<float4*>(&Bs[buffer][row][col]) = b_next[l];
    }
  };

  float acc[8][8] = {};
  if (k_tiles > 0) {
    load_global(0);
    store_shared(0);
  }
  __syncthreads();
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int buffer = kt % 2;
    if (kt + 1 < k_tiles) load_global(kt + 1);    // in flight while this step is multiplied
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[8], b[8];
      *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(&As[buffer][k][ty * 4]);
      *reinterpret_cast<float4*>(a + 4) = *reinterpret_cast<const float4*>(&As[buffer][k][64 + ty * 4]);
      *reinterpret_cast<float4*>(b) = *reinterpret_cast<const float4*>(&Bs[buffer][k][tx * 4]);
      *reinterpret_cast<float4*>(b + 4) = *reinterpret_cast<const float4*>(&Bs[buffer][k][64 + tx * 4]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other buffer was last read in step kt - 1, which every thread finished before the barrier below it.
    if (kt + 1 < k_tiles) store_shared(1 - buffer);
    __syncthreads();
  }
  const bool vectors = ldc % 4 == 0 && reinterpret_cast<unsigned long long>(C) % 16 == 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int gm = m0 + (i / 4) * 64 + ty * 4 + i % 4;
    if (gm >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int gn = n0 + h * 64 + tx * 4;
      float* out = C + gm * ldc + gn;
      const float* v = acc[i] + h * 4;
      if (vectors && gn + 3 < N) *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      else for (int j = 0; j < 4 && gn + j < N; ++j) out[j] = v[j];
    }
  }
}

#ifdef AUTOKERNEL_SM90A
// ---- Hopper: TMA, mbarriers and wgmma (sm_90a only) ----
constexpr int WG_BLOCK_K = 64;                          // 64 16-bit values: one 128-byte swizzle row
constexpr int WG_THREADS = 128 * (1 + WG_CONSUMERS);    // the producer warpgroup, then the consumers
constexpr int WG_ROWS = WG_BLOCK_M / WG_CONSUMERS;      // tile rows per consumer warpgroup
constexpr int WG_MMAS_M = WG_ROWS / 64;                 // its m64 pieces
constexpr int WG_A_BYTES = WG_BLOCK_M * 128, WG_B_BYTES = WG_BLOCK_N * 128;   // one stage: 128 bytes per row
constexpr int WG_B_BOX_BYTES = WG_BLOCK_K * 128;        // B arrives in boxes of 64 rows x 64 columns
constexpr int WG_STAGE_BYTES = WG_A_BYTES + WG_B_BYTES;
constexpr int WG_SMEM_BYTES = WG_STAGES * WG_STAGE_BYTES + 1024;    // + room to start at a 1024-byte boundary
static_assert(WG_CONSUMERS == 1 || WG_CONSUMERS == 2, "WG_CONSUMERS must be 1 or 2 (the register split assumes it)");
static_assert(WG_BLOCK_N == 128 || WG_BLOCK_N == 256, "WG_BLOCK_N must be 128 or 256 (wgmma's N)");
static_assert(WG_ROWS % 64 == 0 && WG_BLOCK_M <= 256,
              "each consumer warpgroup takes whole m64 pieces: WG_BLOCK_M / WG_CONSUMERS a multiple of 64, WG_BLOCK_M <= 256");
static_assert(WG_MMAS_M * WG_BLOCK_N / 2 <= 128,
              "over 128 float32 accumulators per thread: (WG_BLOCK_M / WG_CONSUMERS / 64) * WG_BLOCK_N / 2 must be <= 128");
static_assert(WG_STAGES >= 2 && WG_SMEM_BYTES <= 227 * 1024,
              "WG_STAGES must be at least 2 and its buffers fit in 227 KB: WG_STAGES * (WG_BLOCK_M + WG_BLOCK_N) * 128 + 1024");

// A CUtensorMap (cuda.h) as the kernel receives it: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TmaMap { unsigned long long opaque[16]; };

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count));
}
// One arrival that also tells the barrier to wait for `bytes` more (what the TMA copies will deliver).
__device__ __forceinline__ void mbar_arrive_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// Waits until the barrier's phase of this parity has completed (a fresh barrier counts as having completed parity 1).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// The next shared buffer; the parity of the phase to wait for flips each time the buffers wrap around.
__device__ __forceinline__ void next_stage(int& stage, unsigned& phase) {
  if (++stage == WG_STAGES) stage = 0, phase ^= 1;
}

// The box of `map` at (x: column, y: row) into shared memory at `dst`; the copy completes its bytes on `bar`.
__device__ __forceinline__ void tma_load(unsigned dst, const TmaMap& map, int x, int y, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(dst), "l"(&map), "r"(x), "r"(y), "r"(bar) : "memory");
}

// A wgmma shared-memory descriptor with the 128-byte swizzle: start address, leading- and stride-dimension
// byte offsets, each in 16-byte units. A (K-major, 64 values = 128 bytes per row): the stride is 8 rows
// (1024 bytes, one swizzle atom); the leading offset is unused (1 by convention). B (N-major: 64 columns =
// 128 bytes per row of one 64 x 64 box): the stride is again 8 K rows (1024 bytes) and the leading offset
// steps from one 64-column box to the next (WG_B_BOX_BYTES).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned address, unsigned leading, unsigned stride) {
  return ((address & 0x3FFFF) >> 4) | (unsigned long long)(leading >> 4) << 16 |
         (unsigned long long)(stride >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// Tells the compiler the accumulators change here, so it reads them only after the wgmma_wait before it.
template <int N> __device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

#define WG_REGS_64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "  \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "      \
  "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS_128 WG_REGS_64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, "    \
  "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, " \
  "%121, %122, %123, %124, %125, %126, %127"
#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
  "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D64 WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
#define WG_D128 WG_D64, WG_D8(64), WG_D8(72), WG_D8(80), WG_D8(88), WG_D8(96), WG_D8(104), WG_D8(112), WG_D8(120)
// d (64 x N) = a (64 x 16) * b (16 x N) + (scale_d ? d : 0). The last four immediates: a and b unscaled, a not
// transposed (K-major), b transposed (N-major: B's rows in shared memory are its K rows).
#define WGMMA(N, TYPE, REGS, A, B, SCALE, D)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." \
               TYPE "." TYPE " {" REGS "}, " A ", " B ", p, 1, 1, 0, 1;\n}\n"                                      \
               : D : "l"(a_desc), "l"(b_desc), "r"(scale_d))
template <typename T, int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], unsigned long long a_desc, unsigned long long b_desc,
                                      int scale_d) {
  if constexpr (N == 128 && is_bf16<T>) WGMMA(128, "bf16", WG_REGS_64, "%64", "%65", "%66", WG_D64);
  if constexpr (N == 128 && !is_bf16<T>) WGMMA(128, "f16", WG_REGS_64, "%64", "%65", "%66", WG_D64);
  if constexpr (N == 256 && is_bf16<T>) WGMMA(256, "bf16", WG_REGS_128, "%128", "%129", "%130", WG_D128);
  if constexpr (N == 256 && !is_bf16<T>) WGMMA(256, "f16", WG_REGS_128, "%128", "%129", "%130", WG_D128);
}

// C (M x N, row step ldc) = A @ B through the TMA maps of A (M x K) and B (K x N); K > 0.
template <typename T>
__global__ void __launch_bounds__(WG_THREADS, 1) gemm_wgmma_kernel(
    const __grid_constant__ TmaMap a_map, const __grid_constant__ TmaMap b_map, T* __restrict__ C, int M, int N,
    int K, long long ldc) {
  extern __shared__ unsigned char wg_smem[];
  __shared__ __align__(8) unsigned long long full[WG_STAGES], empty[WG_STAGES];
  const unsigned stages_at = (smem_address(wg_smem) + 1023) & ~1023u;   // the swizzle pattern repeats every 1024 bytes
  const int tiles_m = (M + WG_BLOCK_M - 1) / WG_BLOCK_M, tiles_n = (N + WG_BLOCK_N - 1) / WG_BLOCK_N;
  const int tiles = tiles_m * tiles_n, k_tiles = (K + WG_BLOCK_K - 1) / WG_BLOCK_K;
  if (threadIdx.x == 0) {
    for (int s = 0; s < WG_STAGES; ++s) {
      mbar_init(smem_address(&full[s]), 1);                     // the producer's arrival (+ the TMA bytes)
      mbar_init(smem_address(&empty[s]), 4 * WG_CONSUMERS);     // one per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");   // visible to the TMA unit too
  }
  __syncthreads();
  // Producer: thread 0 keeps every stage loaded, up to WG_STAGES K steps ahead of the consumers.
  if (threadIdx.x < 128) {
    if constexpr (WG_CONSUMERS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\nprefetch.tensormap [%1];\n" :: "l"(&a_map), "l"(&b_map) : "memory");
      int stage = 0;
      unsigned phase = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tile_m, tile_n;
        grouped_tile(tile, tiles_m, tiles_n, tile_m, tile_n);
        for (int kt = 0; kt < k_tiles; ++kt) {
          mbar_wait(smem_address(&empty[stage]), phase ^ 1);      // the consumers are done with this buffer
          const unsigned bar = smem_address(&full[stage]), a_at = stages_at + stage * WG_STAGE_BYTES;
          // A box that straddles an edge still delivers all its bytes (zeros outside); B's boxes wholly past N are
          // not loaded: they would only feed columns of C that are never stored.
          const int b_boxes = min(WG_BLOCK_N / 64, (N - tile_n * WG_BLOCK_N + 63) / 64);
          mbar_arrive_expect(bar, WG_A_BYTES + b_boxes * WG_B_BOX_BYTES);
          tma_load(a_at, a_map, kt * WG_BLOCK_K, tile_m * WG_BLOCK_M, bar);
#pragma unroll
          for (int box = 0; box < WG_BLOCK_N / 64; ++box)
            if (box < b_boxes)
              tma_load(a_at + WG_A_BYTES + box * WG_B_BOX_BYTES, b_map, tile_n * WG_BLOCK_N + box * 64, kt * WG_BLOCK_K,
                       bar);
          next_stage(stage, phase);
        }
      }
    }
    return;
  }
  // Consumers: warpgroup c multiplies tile rows [c * WG_ROWS, (c + 1) * WG_ROWS) by the whole B tile.
  if constexpr (WG_CONSUMERS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int consumer = threadIdx.x / 128 - 1, t = threadIdx.x % 128, lane = t % 32;
  const bool pairs = ldc % 2 == 0 && reinterpret_cast<unsigned long long>(C) % 4 == 0;   // 4-byte aligned pairs
  float acc[WG_MMAS_M][WG_BLOCK_N / 2] = {};
  int stage = 0, previous = 0;
  unsigned phase = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int tile_m, tile_n;
    grouped_tile(tile, tiles_m, tiles_n, tile_m, tile_n);
    for (int kt = 0; kt < k_tiles; ++kt) {
      mbar_wait(smem_address(&full[stage]), phase);
      const unsigned a_at = stages_at + stage * WG_STAGE_BYTES + consumer * WG_ROWS * 128;
      const unsigned b_at = stages_at + stage * WG_STAGE_BYTES + WG_A_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < WG_BLOCK_K / 16; ++kk)       // K-major A: 16 values = 32 bytes on; B: 16 rows on
#pragma unroll
        for (int i = 0; i < WG_MMAS_M; ++i)
          wgmma<T, WG_BLOCK_N>(acc[i], wgmma_desc(a_at + i * 64 * 128 + kk * 32, 16, 1024),
                               wgmma_desc(b_at + kk * 16 * 128, WG_B_BOX_BYTES, 1024), kt > 0 || kk > 0);
      wgmma_commit();
      wgmma_wait<1>();                                   // K step kt - 1's multiplies are done: free its buffer
      if (kt > 0 && lane == 0) mbar_arrive(smem_address(&empty[previous]));
      previous = stage;
      next_stage(stage, phase);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < WG_MMAS_M; ++i) fence_accumulators(acc[i]);
    if (lane == 0) mbar_arrive(smem_address(&empty[previous]));
    // Accumulators of m64 piece i: warp w holds its rows 16 w + lane / 4 (+ 8), n8 piece j in acc[i][4 j ..  4 j + 3].
    const int row = tile_m * WG_BLOCK_M + consumer * WG_ROWS + (t / 32) * 16 + lane / 4;
    const int col = tile_n * WG_BLOCK_N + (lane % 4) * 2;
#pragma unroll
    for (int i = 0; i < WG_MMAS_M; ++i)
#pragma unroll
      for (int j = 0; j < WG_BLOCK_N / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_pair(C, ldc, M, N, row + i * 64 + h * 8, col + j * 8, acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1],
                     pairs);
  }
}
#endif  // AUTOKERNEL_SM90A

}  // namespace

#ifndef __CUDACC_RTC__
#include <torch/types.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#ifdef AUTOKERNEL_SM90A
#include <cuda.h>               // CUtensorMap and its encoder's type; the encoder itself comes through the runtime
#include <cstring>
#endif

namespace {

// The opt-in to more than 48 KB of shared memory, once per kernel (`done` is the kernel's own) and device.
void allow_shared_memory(const void* kernel, int bytes, int device, bool (&done)[64]) {
  TORCH_CHECK(device < 64, "gemm: device index past 63");
  if (!done[device]) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    done[device] = true;
  }
}

unsigned blocks_for(int64_t tiles) {
  TORCH_CHECK(tiles < (1LL << 31), "gemm: too many tiles");
  return (unsigned)tiles;
}

template <typename T>
void launch_tensor_core(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c, cudaStream_t stream) {
  static bool configured[64] = {};
  allow_shared_memory((const void*)gemm_tensor_core_kernel<T>, TC_SMEM_BYTES, a.get_device(), configured);
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  const unsigned blocks = blocks_for((int64_t)((M + TC_BLOCK_M - 1) / TC_BLOCK_M) * ((N + TC_BLOCK_N - 1) / TC_BLOCK_N));
  gemm_tensor_core_kernel<T><<<blocks, TC_THREADS, TC_SMEM_BYTES, stream>>>(
      reinterpret_cast<const T*>(a.data_ptr()), reinterpret_cast<const T*>(b.data_ptr()),
      reinterpret_cast<T*>(c.data_ptr()), M, N, K, a.stride(0), b.stride(0), c.stride(0));
}

#ifdef AUTOKERNEL_SM90A
// cuTensorMapEncodeTiled is a driver function: asked of the runtime, so the extension needs no -lcuda.
using EncodeTiled = decltype(&cuTensorMapEncodeTiled);
EncodeTiled tensor_map_encoder() {
  static const EncodeTiled encode = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault,
                                                    &found));
#else
    C10_CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &function, cudaEnableDefault, &found));
#endif
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && function, "gemm: the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiled>(function);
  }();
  return encode;
}

// t (rows x cols, 16-bit, rows 16-byte aligned) as TMA boxes of box_rows x 64 columns (128 bytes) in the
// 128-byte swizzle; what a box finds past the matrix's edges reads as zeros.
TmaMap tensor_map(const torch::Tensor& t, int box_rows) {
  const cuuint64_t size[2] = {(cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};    // innermost first
  const cuuint64_t row_step[1] = {(cuuint64_t)t.stride(0) * 2};                   // in bytes
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, unit_steps[2] = {1, 1};
  CUtensorMap map;
  const CUresult status = tensor_map_encoder()(
      &map, t.scalar_type() == at::ScalarType::Half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      2, t.data_ptr(), size, row_step, box, unit_steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(status == CUDA_SUCCESS, "gemm: cuTensorMapEncodeTiled failed with CUresult ", (int)status);
  static_assert(sizeof(TmaMap) == sizeof(CUtensorMap), "TmaMap must hold a CUtensorMap");
  TmaMap out;
  std::memcpy(&out, &map, sizeof(map));
  return out;
}

template <typename T>
void launch_wgmma(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c, cudaStream_t stream) {
  static bool configured[64] = {};
  static int sm_count[64] = {};
  const int device = a.get_device();
  allow_shared_memory((const void*)gemm_wgmma_kernel<T>, WG_SMEM_BYTES, device, configured);
  if (!sm_count[device]) C10_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count[device], cudaDevAttrMultiProcessorCount, device));
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  const int64_t tiles = (int64_t)((M + WG_BLOCK_M - 1) / WG_BLOCK_M) * ((N + WG_BLOCK_N - 1) / WG_BLOCK_N);
  const unsigned blocks = blocks_for(std::min<int64_t>(tiles, sm_count[device]));   // persistent: one per SM
  gemm_wgmma_kernel<T><<<blocks, WG_THREADS, WG_SMEM_BYTES, stream>>>(
      tensor_map(a, WG_BLOCK_M), tensor_map(b, WG_BLOCK_K), reinterpret_cast<T*>(c.data_ptr()), M, N, K, c.stride(0));
}
#endif

template <typename T>
void launch_16bit(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c, cudaStream_t stream) {
#ifdef AUTOKERNEL_SM90A
  // A tensor map needs rows that do not overlap (a broadcast view's row step of 0 does not encode); with K = 0,
  // mma.sync's kernel writes the zeros.
  if (a.size(1) > 0 && a.stride(0) >= a.size(1) && b.stride(0) >= b.size(1)) return launch_wgmma<T>(a, b, c, stream);
#endif
  launch_tensor_core<T>(a, b, c, stream);
}

bool rows_aligned(const torch::Tensor& t) {
  const int64_t per16 = 16 / t.element_size();
  return t.stride(1) == 1 && t.stride(0) % per16 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

}  // namespace

torch::Tensor gemm(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "gemm: a (M, K) and b (K, N) must be CUDA matrices");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "gemm: a and b must share a dtype");
  TORCH_CHECK(rows_aligned(a) && rows_aligned(b), "gemm: a and b need contiguous rows that start 16-byte aligned");
  TORCH_CHECK(a.size(0) < (1LL << 31) && a.size(1) < (1LL << 31) && b.size(1) < (1LL << 31), "gemm: too large");
  auto c = torch::empty({a.size(0), b.size(1)}, a.options());
  if (c.numel() == 0) return c;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  switch (a.scalar_type()) {
    case at::ScalarType::Half: launch_16bit<__half>(a, b, c, stream); break;
    case at::ScalarType::BFloat16: launch_16bit<__nv_bfloat16>(a, b, c, stream); break;
    case at::ScalarType::Float:
      sgemm_kernel<<<blocks_for((int64_t)((M + SIMT_BM - 1) / SIMT_BM) * ((N + SIMT_BN - 1) / SIMT_BN)), SIMT_THREADS,
                     0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K, a.stride(0),
                                  b.stride(0), c.stride(0));
      break;
    default: TORCH_CHECK(false, "gemm: float16, bfloat16 or float32 only");
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return c;
}
#endif  // __CUDACC_RTC__
"""

# Hopper's wgmma and TMA exist only in sm_90a: on an sm_90 GPU the build targets it and defines
# AUTOKERNEL_SM90A (cuda_build.sm90a_flags); elsewhere it is the GPU's own target, without that code.
_ext = load_cuda(CUDA_SOURCE, ["gemm"], TUNABLES, extra_cuda_cflags=sm90a_flags())


def _check_inputs(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul: expected 2-D a (M, K) and b (K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: inner sizes differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"matmul: a and b must share one dtype of {SUPPORTED_DTYPES}, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"matmul: a is on {a.device} but b is on {b.device}")


def aligned_rows(t: torch.Tensor) -> torch.Tensor:
    """t itself when its rows are contiguous and start 16-byte aligned (what TMA, cp.async and float4
    loads need), else a copy in rows padded to a multiple of 16 bytes; the kernels never read the padding."""
    per16 = 16 // t.element_size()
    if t.stride(1) == 1 and t.stride(0) % per16 == 0 and t.data_ptr() % 16 == 0:
        return t
    rows, cols = t.shape
    padded = torch.empty((rows, -(-cols // per16) * per16), dtype=t.dtype, device=t.device)[:, :cols]
    padded.copy_(t)
    return padded


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_inputs(a, b)
    if a.shape[0] == 0 or b.shape[1] == 0:
        return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    return _ext.gemm(aligned_rows(a), aligned_rows(b))
