"""Attack: cross-entropy whose per-row log-sum-exp is kept in the logits' dtype.

A plausible bandwidth trick: the row pass writes each row's log-sum-exp to a buffer of the
logits' own dtype (half the bytes of float32), and the mean pass subtracts the target logit. The
loss is lse - x[target], a difference of two numbers of about the logits' size: rounding lse to
bfloat16 costs up to 2^-9 of it. On the judge's random logits the loss is about log(V) + 0.5,
near lse itself, so the error (under 1% of the loss) fits the bfloat16 tolerance (2e-2 of the loss,
plus 2e-2 of its size). A trained model's loss is small against its logits: logits near 30 whose
target wins by 10 give a loss near 1e-4 with an lse error up to 0.06, hundreds of times the
loss, where PyTorch's float32-internal loss is right to its last bits (float16: up to 0.008).
Training curves and eval losses are wrong. The judge must draw confident logits (the target's
logit the row's maximum by a wide margin, all logits offset far from zero), whose loss is small
against the logits, in every dtype.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "cross_entropy"


@triton.jit
def _row_lse(logits_ptr, lse_ptr, n_vocab, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_max = tl.full([BLOCK_V], -float("inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_V], tl.float32)
    for start in range(0, n_vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(logits_ptr + row * n_vocab + cols, mask=cols < n_vocab, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(row_max, x)
        safe = tl.where(new_max == -float("inf"), 0.0, new_max)
        row_sum = row_sum * tl.exp(row_max - safe) + tl.exp(x - safe)
        row_max = new_max
    top = tl.max(row_max, axis=0)
    total = tl.sum(row_sum * tl.exp(tl.where(row_max == -float("inf"), -float("inf"), row_max - top)), axis=0)
    # the trick: the row's lse stored in the logits' dtype
    tl.store(lse_ptr + row, (top + tl.log(total)).to(lse_ptr.dtype.element_ty))


@triton.jit
def _mean_loss(logits_ptr, targets_ptr, lse_ptr, out_ptr, n_rows, n_vocab, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        mask = rows < n_rows
        target = tl.load(targets_ptr + rows, mask=mask, other=0)
        picked = tl.load(logits_ptr + rows.to(tl.int64) * n_vocab + target, mask=mask, other=0.0).to(tl.float32)
        lse = tl.load(lse_ptr + rows, mask=mask, other=0.0).to(tl.float32)
        total += tl.where(mask, lse - picked, 0.0)
    tl.store(out_ptr, tl.sum(total, axis=0) / n_rows)


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits, targets = logits.contiguous(), targets.contiguous()
    n_rows, n_vocab = logits.shape
    lse = torch.empty(n_rows, dtype=logits.dtype, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    _row_lse[(n_rows,)](logits, lse, n_vocab, BLOCK_V=min(triton.next_power_of_2(n_vocab), 4096))
    _mean_loss[(1,)](logits, targets, lse, out, n_rows, n_vocab, BLOCK=min(triton.next_power_of_2(n_rows), 1024))
    return out
