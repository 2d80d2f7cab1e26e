"""The flash attention starter beyond what the judge checks: masking, scales, strides, grouped queries, wide
heads, TMA and pointer paths, block configs."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import math
import random
import time

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel

attention, _ = load_kernel(starter_path("flash_attention"))


def _qkv(batch, heads, seq, head_dim, dtype=torch.float32, seq_k=None, seed=0, kv_heads=None):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn((batch, heads, seq, head_dim), generator=gen).to(dtype)
    k = torch.randn((batch, kv_heads or heads, seq_k or seq, head_dim), generator=gen).to(dtype)
    v = torch.randn((batch, kv_heads or heads, seq_k or seq, head_dim), generator=gen).to(dtype)
    return q, k, v


def _assert_matches_reference(q, k, v, **options):
    out = attention.kernel_fn(q, k, v, **options)
    expected = reference.flash_attention(q.double(), k.double(), v.double(), **options)
    tol = TOLERANCE[q.dtype]
    assert out.dtype == q.dtype and out.shape == q.shape
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)
    return out


def test_causal_masks_future_keys_and_differs_from_full_attention():
    q, k, v = _qkv(1, 2, 45, 32)
    causal = _assert_matches_reference(q, k, v, causal=True)
    full = _assert_matches_reference(q, k, v, causal=False)
    # The last query sees every key either way; the first one only itself when causal.
    torch.testing.assert_close(causal[:, :, -1], full[:, :, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(causal[:, :, 0], v[:, :, 0], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(causal[:, :, 0], full[:, :, 0], atol=1e-3)


def test_custom_sm_scale_is_used_and_the_default_is_one_over_sqrt_d():
    q, k, v = _qkv(1, 1, 40, 16)
    _assert_matches_reference(q, k, v, sm_scale=0.05)
    default = attention.kernel_fn(q, k, v)
    explicit = attention.kernel_fn(q, k, v, sm_scale=1 / math.sqrt(16))
    assert torch.equal(default, explicit)


def test_a_single_query_and_key():
    _assert_matches_reference(*_qkv(2, 3, 1, 16), causal=True)


@pytest.mark.parametrize("head_dim", [8, 24])
def test_head_dims_that_are_not_a_tile_size_are_padded_and_masked(head_dim):
    _assert_matches_reference(*_qkv(1, 2, 33, head_dim), causal=True)


@pytest.mark.parametrize("seq_q,seq_k", [(5, 37), (40, 70)])
def test_causal_alignment_with_more_keys_than_queries(seq_q, seq_k):
    # As in the reference: query i sees keys j <= i + (seq_k - seq_q), as in decoding with a KV cache.
    _assert_matches_reference(*_qkv(1, 1, seq_q, 16, seq_k=seq_k), causal=True)


def test_strided_inputs_from_a_batch_seq_head_layout():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((2, 37, 3, 16), generator=gen).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    _assert_matches_reference(q, k, v, causal=True)


def test_tma_is_used_only_where_the_copy_engine_can_describe_the_tensors():
    q, k, v = _qkv(1, 2, 16, 64, dtype=torch.float16)
    assert attention._tma_ready(q, k, v)
    assert attention._tma_ready(*(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)))
    assert not attention._tma_ready(*_qkv(1, 2, 16, 36, dtype=torch.float16))   # 72-byte rows
    assert not attention._tma_ready(q.transpose(2, 3), k, v)                     # strided head dim



def test_the_tma_check_works_on_fake_tensors_as_torch_compile_traces_the_kernel():
    """torch.compile traces kernel_fn on fake tensors, which have no data pointer: the alignment comes from the
    storage offset there (GPT-2's routes under compile were lost to 'Cannot access data pointer')."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v = _qkv(1, 2, 16, 64, dtype=torch.float16)
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        assert attention._tma_ready(fq, fk, fv)
        shifted = mode.from_tensor(torch.empty(2 * 16 * 64 + 1, dtype=torch.float16)[1:].view(1, 2, 16, 64))
        assert not attention._tma_ready(shifted, fk, fv)                    # 2 bytes past a 16-byte boundary


LOWER_WITH_A_FLOAT64_SCALE = """
import sys
from triton.backends import backends
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton._C.libtriton import ir
from autokernel.core.kernel_file import import_file

kernel = import_file(sys.argv[1], "_lowered_attention")._flash_attention_kernel
constants = {"BLOCK_M": 64, "BLOCK_N": 64, "HEAD_DIM": 64, "BLOCK_D": 64, "CAUSAL": True, "UPCAST": False, "group": 1}
signature = {name: "constexpr" if name in constants else "*fp16" if name.endswith("_ptr") else
             "fp64" if name == "qk_scale" else "i32" for name in kernel.arg_names}
source = ASTSource(kernel, signature, {(kernel.arg_names.index(n),): v for n, v in constants.items()})
target = GPUTarget("cuda", 90, 32)
backend = backends["nvidia"].compiler(target)
options = backend.parse_options({})
context = ir.context()
ir.load_dialects(context)
backend.load_dialects(context)
module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
print("lowered", "tt.dot" in str(module))
"""


def test_a_float64_scale_as_torch_compile_passes_it_still_lowers_for_hopper():
    """Inductor types a Python float argument of a user kernel float64; the kernel must still lower to Triton IR
    for an sm_90 target (the front end only: no GPU needed, but not the interpreter, hence a child process).
    Without the cast, tl.dot met a float64 accumulator and torch.compile failed on GPT-2 with it."""
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", LOWER_WITH_A_FLOAT64_SCALE, str(starter_path("flash_attention"))],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "lowered True" in done.stdout, done.stderr[-2000:]

def _count_descriptors(monkeypatch) -> list:
    made = []
    original = attention.TensorDescriptor.from_tensor
    monkeypatch.setattr(attention.TensorDescriptor, "from_tensor",
                        lambda *args, **kwargs: made.append(1) or original(*args, **kwargs))
    return made


def test_small_calls_take_the_pointer_path_and_big_ones_tma(monkeypatch):
    made = _count_descriptors(monkeypatch)
    q, k, v = _qkv(1, 2, 40, 32, dtype=torch.float16)
    _assert_matches_reference(q, k, v, causal=True)
    assert made == []                                   # 0.0004 GFLOP: descriptors would cost more than the work
    monkeypatch.setitem(attention.TUNABLES, "tma_min_gflop", 0)
    _assert_matches_reference(q, k, v, causal=True)
    assert len(made) == 4                               # q, k, v and the output


@pytest.mark.parametrize("causal", [True, False])
def test_the_pointer_path_agrees_with_the_tma_path(monkeypatch, causal):
    monkeypatch.setitem(attention.TUNABLES, "tma_min_gflop", 0)
    made = _count_descriptors(monkeypatch)
    q, k, v = _qkv(2, 2, 77, 48, dtype=torch.float16, seq_k=90)
    assert attention._tma_ready(q, k, v)
    through_tma = _assert_matches_reference(q, k, v, causal=causal)
    assert made
    monkeypatch.setattr(attention, "_tma_ready", lambda *tensors: False)
    torch.testing.assert_close(attention.kernel_fn(q, k, v, causal=causal), through_tma, atol=2e-3, rtol=2e-3)


def test_short_sequences_get_the_small_config_and_long_ones_the_big_one(monkeypatch):
    monkeypatch.setitem(attention.TUNABLES, "large_min_seq", 100)
    assert attention._block_config(99)["BLOCK_M"] == attention.TUNABLES["SMALL_BLOCK_M"]
    assert attention._block_config(100)["BLOCK_N"] == attention.TUNABLES["BLOCK_N"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("large_min_seq", [1, 10**9], ids=["big-block config", "small-block config"])
def test_both_configs_cross_the_diagonal_and_the_sequence_end(monkeypatch, large_min_seq, dtype):
    monkeypatch.setitem(attention.TUNABLES, "large_min_seq", large_min_seq)
    q, k, v = _qkv(1, 2, 150, 32, dtype=dtype)
    _assert_matches_reference(q, k, v, causal=True)
    _assert_matches_reference(q, k, v, causal=False)


def _combinations():
    """The smallest choice of every tunable, the largest, and unequal query and key blocks both ways."""
    choices = attention.TUNABLE_CHOICES
    rng = random.Random(0)
    smallest = {k: min(v) for k, v in choices.items()}
    return [smallest, {k: max(v) for k, v in choices.items()},
            {**smallest, "SMALL_BLOCK_M": 16, "SMALL_BLOCK_N": 64, "BLOCK_M": 64, "BLOCK_N": 128,
             "WIDE_BLOCK_M": 16, "WIDE_BLOCK_N": 64},
            {**smallest, "SMALL_BLOCK_M": 64, "SMALL_BLOCK_N": 16, "BLOCK_M": 256, "BLOCK_N": 32,
             "WIDE_BLOCK_M": 128, "WIDE_BLOCK_N": 16},
            {k: rng.choice(v) for k, v in choices.items()}]


@pytest.mark.parametrize("combination", _combinations(),
                         ids=["smallest", "largest", "narrow queries", "narrow keys", "random"])
def test_tunable_choices_stay_correct_in_both_configs(monkeypatch, combination):
    for key, value in combination.items():
        monkeypatch.setitem(attention.TUNABLES, key, value)
    q, k, v = _qkv(1, 1, 41, 16)
    _assert_matches_reference(q, k, v, causal=True)
    _assert_matches_reference(*_qkv(1, 2, 41, 136, kv_heads=1), causal=True)      # the wide blocks
    _assert_matches_reference(*_qkv(1, 2, 41, 264, kv_heads=1), causal=True)      # the scores in memory
    monkeypatch.setitem(attention.TUNABLES, "large_min_seq", 1)
    _assert_matches_reference(q, k, v, causal=True)


def test_every_tunable_has_choices_that_include_its_current_value():
    assert attention.TUNABLES.keys() == attention.TUNABLE_CHOICES.keys()
    for key, value in attention.TUNABLES.items():
        assert value in attention.TUNABLE_CHOICES[key], key


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["grouped-query", "multi-query"])
@pytest.mark.parametrize("causal", [True, False])
def test_fewer_key_value_heads_than_query_heads(kv_heads, causal):
    q, k, v = _qkv(2, 4, 37, 16, kv_heads=kv_heads, seq_k=45)
    out = _assert_matches_reference(q, k, v, causal=causal)
    # Query head h reads key/value head h // (H / KV), as torch's SDPA with enable_gqa does.
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if not causal:
        torch.testing.assert_close(out, sdpa, atol=1e-5, rtol=1e-5)
    group = 4 // kv_heads
    for head in range(4):
        alone = attention.kernel_fn(q[:, head:head + 1], k[:, head // group:head // group + 1],
                                    v[:, head // group:head // group + 1], causal=causal)
        torch.testing.assert_close(out[:, head:head + 1], alone, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("tma", [True, False], ids=["TMA", "pointers"])
def test_grouped_query_attention_through_both_load_paths(monkeypatch, tma):
    monkeypatch.setitem(attention.TUNABLES, "tma_min_gflop", 0)
    if not tma:
        monkeypatch.setattr(attention, "_tma_ready", lambda *tensors: False)
    _assert_matches_reference(*_qkv(1, 6, 40, 32, dtype=torch.float16, kv_heads=3), causal=True)


@pytest.mark.parametrize("head_dim", [160, 256])
def test_head_dims_up_to_256_take_the_wide_blocks(head_dim):
    assert attention._block_config(4096, head_dim)["BLOCK_M"] == attention.TUNABLES["WIDE_BLOCK_M"]
    assert attention._block_config(4096, 128)["BLOCK_M"] == attention.TUNABLES["BLOCK_M"]
    _assert_matches_reference(*_qkv(1, 2, 24, head_dim, dtype=torch.bfloat16, kv_heads=1), causal=True)


def _small_score_tiles(monkeypatch):
    """Tiles small enough that a short interpreted call crosses several of each, and the diagonal."""
    for key, value in {"SCORES_BLOCK_M": 32, "SCORES_BLOCK_N": 32, "SCORES_BLOCK_K": 32, "VALUES_BLOCK_M": 32,
                       "VALUES_BLOCK_N": 32, "VALUES_BLOCK_D": 64}.items():
        monkeypatch.setitem(attention.TUNABLES, key, value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
def test_head_dims_above_the_limit_keep_their_scores_in_memory(monkeypatch, dtype, causal):
    # KernelBench's attention has head dim 1024: no (BLOCK_M x D) tile fits in registers, so the scores go through
    # memory; D = 300 is not a multiple of any tile (masked D slices), S = 70 crosses three score tiles.
    _small_score_tiles(monkeypatch)
    calls = []
    monkeypatch.setattr(attention, "_attention_through_scores",
                        lambda *args, f=attention._attention_through_scores: calls.append(1) or f(*args))
    _assert_matches_reference(*_qkv(1, 2, 70, 300, dtype=dtype), causal=causal)
    assert calls == [1]


@pytest.mark.parametrize("seq_q,seq_k", [(37, 70), (70, 70)])
def test_the_scores_path_takes_grouped_heads_strides_and_causal_alignment(monkeypatch, seq_q, seq_k):
    _small_score_tiles(monkeypatch)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn((2, seq_q, 4, 264), generator=gen).transpose(1, 2)        # (B, S, H, D) read as (B, H, S, D)
    k, v = (torch.randn((2, 2, seq_k, 264), generator=gen) for _ in range(2))
    assert not q.is_contiguous()
    _assert_matches_reference(q, k, v, causal=True)
    _assert_matches_reference(q, k, v, causal=False, sm_scale=0.02)


def test_a_values_block_wider_than_a_score_tile_is_narrowed_to_it(monkeypatch):
    # Each values block reads one score tile's P with one factor a row, so it may not straddle two tiles.
    _small_score_tiles(monkeypatch)
    monkeypatch.setitem(attention.TUNABLES, "VALUES_BLOCK_N", 64)
    _assert_matches_reference(*_qkv(1, 2, 70, 264, dtype=torch.float16), causal=True)


def test_scores_beyond_their_memory_limit_are_refused_at_once(monkeypatch):
    q, k, v = _qkv(1, 2, 16, attention.MAX_HEAD_DIM + 1)
    monkeypatch.setattr(attention, "SCORES_MAX_BYTES", 4 * 2 * 16 * 16 - 1)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"D=257 is above MAX_HEAD_DIM = 256, and its scores would take"):
        attention.kernel_fn(q, k, v)
    assert time.monotonic() - started < 1.0      # no compile, no launch
    attention.kernel_fn(*_qkv(1, 2, 16, attention.MAX_HEAD_DIM))     # the one-pass kernel has no such limit
    monkeypatch.setattr(attention, "SCORES_MAX_BYTES", 4 * 2 * 16 * 16)
    _assert_matches_reference(q, k, v)


def test_bad_inputs_get_clear_errors():
    q, k, v = _qkv(1, 2, 8, 16)
    with pytest.raises(ValueError, match="share B and D"):
        attention.kernel_fn(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="multiple of k and v's 3"):
        attention.kernel_fn(*_qkv(1, 4, 8, 16, kv_heads=3))
    with pytest.raises(ValueError, match="same shape"):
        attention.kernel_fn(q, k, v[:, :1])
    with pytest.raises(TypeError, match="share one dtype"):
        attention.kernel_fn(q, k.half(), v)
    with pytest.raises(ValueError, match=r"\(B, H, S, D\)"):
        attention.kernel_fn(q[0], k[0], v[0])
