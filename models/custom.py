"""Template for your own model file: copy it, put your model in, and run `autokernel optimize my_model.py`.

AutoKernel accepts a model file in either of two forms (this file shows both; one is enough):

  1. get_model() returns the nn.Module; get_inputs() returns the list of forward() arguments.
  2. KernelBench's form: class Model, get_inputs(), get_init_inputs(); the model is built as
     Model(*get_init_inputs()). Every KernelBench problem file already works as-is.

When a file has both, get_model() wins. Either way:
  - build on no particular device and in no particular dtype: the loader makes everything on the
    chosen device (cuda if there is one) and casts floating weights and inputs when --dtype is given;
    integer inputs (token ids, class targets) keep their dtype;
  - weights may stay random: kernel speed depends on shapes and dtypes, not on trained values;
  - the loader's model_kwargs go to get_model() (or Model), and get_inputs() receives the ones
    it names, so one `depth=4` or `config="tiny"` can pick both the model and its inputs;
  - the file's folder is on sys.path while it loads, so `from my_layers import Block` works;
  - to profile other input sizes without editing the file, pass --input-shape (e.g. 8,256,512);
  - give repeated blocks their own nn.Module classes with telling names (Attention, MLP, RMSNorm):
    the profiler reports time per module, and verify swaps whole modules for optimized kernels.
"""

import torch
import torch.nn.functional as F
from torch import nn

# Sizes for the example inputs; KernelBench files keep them as module-level constants like these.
BATCH_SIZE, TOKENS, HIDDEN, CLASSES = 4, 256, 512, 100


class Mixer(nn.Module):
    """One residual block: LayerNorm, then an MLP with a GELU."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    """Token features (B, T, hidden) -> class probabilities (B, classes)."""

    def __init__(self, hidden: int = HIDDEN, classes: int = CLASSES, depth: int = 2):
        super().__init__()
        self.blocks = nn.Sequential(*(Mixer(hidden) for _ in range(depth)))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.blocks(x).mean(dim=1)
        return torch.softmax(self.head(pooled), dim=-1)


# Form 1 ---------------------------------------------------------------------------------------
def get_model(depth: int = 2) -> nn.Module:
    return Model(HIDDEN, CLASSES, depth)


def get_inputs() -> list:
    return [torch.randn(BATCH_SIZE, TOKENS, HIDDEN)]


# Form 2 (KernelBench) adds get_init_inputs(), the positional arguments of Model(...) -----------
def get_init_inputs() -> list:
    return [HIDDEN, CLASSES]
