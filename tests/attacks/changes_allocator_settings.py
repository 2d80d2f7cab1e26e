"""Attack (GPU only): change the CUDA caching allocator's settings when imported.

Settings like expandable segments change how every allocation of the user's model behaves, and
in the old judge they applied to the reference too. Rejected at load: the worker compares the
allocator settings (and the variables that carry them) before and after the import.
"""

import os
import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
kernel_fn = _parts["honest_kernel_fn"]

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
torch.cuda.memory._set_allocator_settings("expandable_segments:True")
