"""autokernel/kernel_types/rmsnorm_linear.py: the profiler counts an RMSNorm whose output only nn.Linear layers read
with them as rmsnorm_linear, one site per linear (the router's side: tests/test_fold_routing.py)."""

import torch
from torch import nn

from autokernel.core import hardware
from autokernel.profile import profiler
from tests.test_classify import DIM, ROWS, PlainNorm, _sites, one_thread  # noqa: F401 (a fixture)


def test_llama_norms_feeding_only_linears_count_as_rmsnorm_linear(one_thread):
    from models import llama

    torch.manual_seed(0)
    model = llama.get_model("tiny", n_layers=2).eval()
    report = profiler.profile_model(model, llama.get_inputs("tiny", seq=16), warmup=1, iters=2)
    folded = _sites(report, "rmsnorm_linear")
    projections = {f"layers.{i}.attention.{name}_proj" for i in (0, 1) for name in "qkv"}
    assert set(folded) == projections | {"lm_head"}
    assert folded["layers.0.attention.k_proj"].shape == {"M": 16, "N": 64, "K": 64}
    assert folded["lm_head"].shape == {"M": 16, "N": 1000, "K": 64}
    assert all(site.calls == 1 for site in folded.values())
    # The norm's ops are charged once, to its first linear; the others hold their own product only.
    assert "aten::rsqrt" in folded["layers.0.attention.q_proj"].ops
    assert folded["layers.0.attention.k_proj"].ops == ["aten::linear"]
    assert "layers.0.attention_norm" not in _sites(report, "rmsnorm")
    # The MLP's norm feeds only the gated MLP: the pair is rmsnorm_mlp (below), neither rmsnorm nor fused_mlp.
    assert _sites(report, "rmsnorm") == {} and _sites(report, "fused_mlp") == {}
    assert set(_sites(report, "matmul")) == {"layers.0.attention.o_proj", "layers.1.attention.o_proj"}
    plan = profiler.build_plan(report, hardware.detect())
    entry = next(e for e in plan.entries if e.kernel_type == "rmsnorm_linear")
    assert entry.calls == 7 and {"M": 16, "N": 64, "K": 64} in entry.shapes
    assert "rmsnorm_linear" in plan.extra["fold_policy"]


class RMSNorm(PlainNorm):
    """Named so: a norm the router could fold (PlainNorm, unnamed, is never folded: the router could not run it)."""
    eps = 1e-6


class RMSNormResidual(nn.Module):
    """An RMSNorm whose output a linear reads and the residual adds: not foldable."""

    def __init__(self):
        super().__init__()
        self.norm, self.proj = RMSNorm(DIM), nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return self.proj(h) + h


def test_a_norm_whose_output_is_also_used_elsewhere_stays_rmsnorm_and_matmul(one_thread):
    torch.manual_seed(0)
    report = profiler.profile_model(RMSNormResidual().eval(), (torch.randn(ROWS, DIM),), warmup=1, iters=2)
    assert _sites(report, "rmsnorm_linear") == {}
    assert set(_sites(report, "rmsnorm")) == {"norm"} and set(_sites(report, "matmul")) == {"proj"}


class RMSNormLinear(RMSNormResidual):
    def forward(self, x):
        return self.proj(self.norm(x))


def test_the_same_norm_feeding_only_its_linear_is_folded(one_thread):
    torch.manual_seed(0)
    report = profiler.profile_model(RMSNormLinear().eval(), (torch.randn(ROWS, DIM),), warmup=1, iters=2)
    assert {path: site.shape for path, site in _sites(report, "rmsnorm_linear").items()} == {
        "proj": {"M": ROWS, "N": DIM, "K": DIM}}
    assert _sites(report, "rmsnorm") == {} and _sites(report, "matmul") == {}
