"""Attack 4: launch a real Triton kernel into a scratch buffer, then return PyTorch's result.

The old judge only asked for at least one launch of the kernel's own. Rejected in smoke: the
worker refuses PyTorch compute ops inside kernel_fn and names the op.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"


@triton.jit
def _decoy(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    scratch = torch.empty(16, dtype=torch.float32, device=x.device)
    _decoy[(1,)](scratch, 16, BLOCK=16)
    return torch.softmax(x, dim=-1)
