"""The judge's stream marker: a tiny Triton kernel the worker launches, on the stream the timer waits on,
just before each call of a CUDA kernel file's kernel_fn (autokernel/judge/cuda_launches.py).

Its event in the profiler's trace names that stream. It lives in a module of its own so that Triton
resolves its names from module globals, and so that cuda_launches (read by bench.py and the loop)
does not import Triton. No kernel file may name a kernel after it (cuda_launches.cuda_source_problem).
"""

import triton
import triton.language as tl


@triton.jit
def _autokernel_stream_marker(target):
    tl.store(target, 1.0)
