"""Which norms fold into the modules consuming their output: found on a real forward, refused on any other use."""

import torch
from torch import nn

from autokernel.routing.norm_folding import find_folds, is_metadata_read
from models import llama


def _is_linear(module: nn.Module) -> bool:
    return type(module) is nn.Linear


def _norms(model: nn.Module) -> dict[str, nn.Module]:
    return {path: m for path, m in model.named_modules() if "rmsnorm" in type(m).__name__.lower()}


def _search(model, x, may_replace=lambda m: False):
    return find_folds(model, lambda: model(x), _norms(model), _is_linear, may_replace)


def test_llama_norms_fold_into_the_linears_that_read_them():
    torch.manual_seed(0)
    model = llama.get_model("tiny", n_layers=1)
    search = _search(model, llama.get_inputs("tiny", seq=8)[0])
    folds = {fold.norm_path: fold.consumer_paths for fold in search.folds}
    assert folds == {
        "layers.0.attention_norm": ("layers.0.attention.q_proj", "layers.0.attention.k_proj",
                                    "layers.0.attention.v_proj"),
        "layers.0.mlp_norm": ("layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"),
        "norm": ("lm_head",)}
    assert search.rejected == {}
    assert search.consumer_of()["lm_head"].norm is model.norm


def test_a_norm_feeding_a_module_another_kernel_replaces_is_not_folded():
    model = llama.get_model("tiny", n_layers=1)
    search = _search(model, llama.get_inputs("tiny", seq=8)[0], may_replace=lambda m: isinstance(m, llama.SwiGLU))
    assert "layers.0.mlp_norm" not in {fold.norm_path for fold in search.folds}
    assert "which another kernel may replace" in search.rejected["layers.0.mlp_norm"]


def test_a_norm_folds_into_a_whole_mlp_even_where_its_linears_may_be_replaced():
    # rmsnorm_mlp's consumer is the MLP: inside its call the norm's output enters gate and up,
    # which a matmul kernel may replace; the fused kernel replaces the MLP whole, so that is no use.
    model = llama.get_model("tiny", n_layers=1)
    search = find_folds(model, lambda: model(llama.get_inputs("tiny", seq=8)[0]), _norms(model),
                        lambda m: isinstance(m, llama.SwiGLU), may_replace=_is_linear)
    assert {fold.norm_path: fold.consumer_paths for fold in search.folds} == {"layers.0.mlp_norm": ("layers.0.mlp",)}
    # The attention's norm feeds linears outside any consumer: those may be replaced.
    assert "which another kernel may replace" in search.rejected["layers.0.attention_norm"]


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    """norm -> proj, with one extra use of the norm's output chosen by `extra`."""

    def __init__(self, extra: str, dim: int = 8):
        super().__init__()
        self.norm, self.proj, self.other = RMSNorm(dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.extra = extra

    def forward(self, x):
        h = self.norm(x)
        assert h.shape == x.shape and h.dim() == 2 and h.size(-1) == 8     # metadata reads are no use
        out = self.proj(h)
        if self.extra == "residual":
            out = out + h
        elif self.extra == "view":
            out = out + self.other(h.view(-1, 8))
        elif self.extra == "shared linear":
            out = out + self.proj(x)
        elif self.extra == "in place":
            x.mul_(2)
            out = out + self.other(h)
        elif self.extra == "returned":
            return out, h
        elif self.extra == "functional linear":
            out = out + nn.functional.linear(h, self.other.weight)
        return out


def test_any_other_use_of_the_output_keeps_the_norm_unfolded():
    x = torch.randn(4, 8)
    assert [f.consumer_paths for f in _search(Block("none"), x).folds] == [("proj",)]
    for extra, why in [("residual", "used by add outside a consumer"), ("view", "used by view outside a consumer"),
                       ("shared linear", "also takes other inputs"), ("returned", "returned from the forward"),
                       ("functional linear", "used by linear outside a consumer"),
                       ("in place", "its input changed in place before other read its output")]:
        search = _search(Block(extra), x)
        assert search.folds == [], extra
        assert why in search.rejected["norm"], (extra, search.rejected)


def test_a_norm_called_twice_folds_only_if_every_call_feeds_consumers_alone():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.a, self.b = RMSNorm(8), nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x, leak=False):
            first = self.a(self.norm(x))
            second = self.norm(first)
            return self.b(second) + (second if leak else 0)

    model = Twice()
    x = torch.randn(3, 8)
    assert [f.consumer_paths for f in find_folds(model, lambda: model(x), _norms(model), _is_linear).folds] == [
        ("a", "b")]
    assert find_folds(model, lambda: model(x, leak=True), _norms(model), _is_linear).folds == []


def test_metadata_reads_are_told_from_uses():
    seen = []

    class Record(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.randn(2, 3)
    with Record():
        x.shape, x.dtype, x.size(), x.dim()
        x + 1
        x.view(3, 2)
    assert [is_metadata_read(f) for f in seen] == [True, True, True, True, False, False]


def test_a_consumer_inside_a_consumer_is_part_of_it():
    # With gated MLPs as consumers too (rmsnorm_mlp), the MLP's own gate and up linears are its inside.
    model = llama.get_model("tiny", n_layers=1)
    search = find_folds(model, lambda: model(llama.get_inputs("tiny", seq=8)[0]), _norms(model),
                        lambda m: _is_linear(m) or isinstance(m, llama.SwiGLU))
    assert search.consumer_of()["layers.0.mlp"].norm_path == "layers.0.mlp_norm"
    assert {f.norm_path: f.consumer_paths for f in search.folds}["layers.0.mlp_norm"] == ("layers.0.mlp",)
