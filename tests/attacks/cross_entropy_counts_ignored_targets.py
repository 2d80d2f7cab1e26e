"""Attack: cross-entropy that skips the ignored targets' losses but still divides by every row.

F.cross_entropy leaves a target of -100 (its default ignore_index: padding in a language model's batch) out of
the loss and out of the mean's count. A kernel that only zeroes those rows' losses is right on inputs without
padding and off by the padded fraction on every padded batch; one that does not look at -100 at all reads
outside its row. The router once looked at the targets on every call and sent padded batches to PyTorch (a
device sync, and no route under torch.compile); now the judge draws padded targets, and this must fail there.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "cross_entropy"


@triton.jit
def _row_losses(logits_ptr, targets_ptr, losses_ptr, n_vocab, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_V)
    row_max = tl.full([BLOCK_V], -float("inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_V], tl.float32)
    for start in range(0, n_vocab, BLOCK_V):
        x = tl.load(logits_ptr + row * n_vocab + start + cols, mask=start + cols < n_vocab,
                    other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(row_max, x)
        safe = tl.where(new_max == -float("inf"), 0.0, new_max)
        row_sum = row_sum * tl.exp(row_max - safe) + tl.exp(x - safe)
        row_max = new_max
    top = tl.max(row_max, axis=0)
    lse = top + tl.log(tl.sum(row_sum * tl.exp(tl.where(row_max == -float("inf"), -float("inf"), row_max - top)),
                              axis=0))
    target = tl.load(targets_ptr + row)
    counted = target != -100
    picked = tl.load(logits_ptr + row * n_vocab + tl.where(counted, target, 0)).to(tl.float32)
    tl.store(losses_ptr + row, tl.where(counted, lse - picked, 0.0))


@triton.jit
def _mean(losses_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        total += tl.load(losses_ptr + rows, mask=rows < n_rows, other=0.0)
    tl.store(out_ptr, tl.sum(total, axis=0) / n_rows)       # the trick: every row counted


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits, targets = logits.contiguous(), targets.contiguous()
    n_rows, n_vocab = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    _row_losses[(n_rows,)](logits, targets, losses, n_vocab, BLOCK_V=min(triton.next_power_of_2(n_vocab), 4096))
    _mean[(1,)](losses, out, n_rows, BLOCK=min(triton.next_power_of_2(max(n_rows, 1)), 1024))
    return out
