"""autokernel/kernel_types/rotary_embedding.py: a rotary module's tables are cut and cast once per length and dtype."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from autokernel.kernel_types import rotary_embedding  # noqa: E402
from tests.test_plugin import tiny_llama  # noqa: E402


def test_rotary_tables_are_cut_and_cast_once_per_length_and_dtype():
    model, _ = tiny_llama()
    rotary = model.layers[0].attention.rotary
    cos, sin = rotary_embedding.rotary_tables(rotary, 5, torch.float16)
    assert cos.dtype == torch.float16 and cos.shape == (5, 8) and torch.equal(cos, rotary.cos[:5].half())
    assert rotary_embedding.rotary_tables(rotary, 5, torch.float16)[0] is cos
    assert rotary_embedding.rotary_tables(rotary, 6, torch.float16)[0].shape == (6, 8)
