"""Tests for autokernel/verify/route_table.py: the noise rule, and no routing by timings that mean nothing."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from autokernel.verify import route_table  # noqa: E402
from autokernel.verify.latency import Latency  # noqa: E402
from tests.test_plugin import LLAMA_SHAPES, reference_sources, tiny_llama, write_optimized  # noqa: E402


def latency(ms: float, spread: float = 0.0) -> Latency:
    return Latency(ms, ms * (1 - spread / 2), ms * (1 + spread / 2), 5)


def test_ours_must_beat_pytorch_by_more_than_the_noise():
    assert route_table.faster_by_more_than_noise(latency(1.0), latency(1.1))[0]
    # 2% faster is within the 3% floor; 10% faster is within a 25% spread.
    assert not route_table.faster_by_more_than_noise(latency(1.0), latency(1.02))[0]
    assert not route_table.faster_by_more_than_noise(latency(1.0, spread=0.25), latency(1.1))[0]
    routed, why = route_table.faster_by_more_than_noise(latency(0.010), latency(0.020))
    assert routed and why == "faster: 2.00x (noise 3%; ours 10.0 us, PyTorch 20.0 us)"
    assert route_table.faster_by_more_than_noise(None, latency(1.0)) == (False, "could not be timed")


def test_without_a_gpu_every_site_is_recorded_and_none_routes(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", LLAMA_SHAPES, sources=reference_sources(*LLAMA_SHAPES))
    with torch.no_grad():
        plugin.plug_in(model, folder, policy=ALL, keep_examples=True)
        model(*inputs)
    records = route_table.measure(plugin.router_of(model), on_gpu=False)
    rows = [record for kernel_records in records.values() for record in kernel_records]
    assert sorted(records) == ["1_rmsnorm", "2_matmul", "3_flash_attention", "4_fused_mlp", "5_rotary_embedding"]
    assert {(r.site, r.calls) for r in records["2_matmul"]} == {("module layers.0.attention.q_proj (Linear)", 4),
                                                                ("module lm_head (Linear)", 1)}
    assert not any(r.route_eager or r.route_compiled for r in rows)
    assert {r.why for r in rows} == {route_table.NOT_TIMED_ON_CPU}
    assert all(r.ours_us is None for r in rows)
