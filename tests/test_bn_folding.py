"""Batch norm folded into the convolution or linear before it: the same outputs, inference only, refused elsewhere."""

import pytest
import torch
from torch import nn

from autokernel.routing.bn_folding import fold_batch_norms, folded_parameters, folding_of, unfold_batch_norms
from autokernel.core.patching import RUNS, runs_of
from autokernel.routing.outputs import output_error, tolerance
from benchmarks.zoo import cnn
from tests.plugin_helpers import guard_lines


def _with_statistics(model: nn.Module) -> nn.Module:
    """Running statistics and affine parameters far from the identity, so that a fold left out would show."""
    torch.manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-2, 2)
            module.running_var.uniform_(0.25, 4)
            module.weight.data.uniform_(0.5, 2)
            module.bias.data.uniform_(-1, 1)
    return model.eval()


def _counted_batch_norms(model: nn.Module, inputs) -> int:
    """Batch norm calls that really normalized in one forward (not handed their input back)."""
    calls = []
    real = torch.nn.functional.batch_norm

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    torch.nn.functional.batch_norm = counting
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        torch.nn.functional.batch_norm = real
    return len(calls)


def test_the_zoo_conv_bn_relu_runs_without_its_batch_norm_and_computes_the_same():
    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    with torch.no_grad():
        expected = model(*inputs)
    folding = fold_batch_norms(model, inputs)
    assert [(f.layer_path, f.norm_path) for f in folding.folds] == [("0", "1")]
    assert folding.rejected == {}
    assert _counted_batch_norms(model, inputs) == 0
    with torch.no_grad():
        folded = model(*inputs)
    assert output_error(expected, folded) <= tolerance(expected)
    assert type(model[0]) is not nn.Conv2d and isinstance(model[0], nn.Conv2d) and repr(model[0]).startswith("Conv2d")
    assert [run.method for run in runs_of(model[0])] == ["_run_layer"]
    unfold_batch_norms(model)
    assert folding_of(model) is None and type(model[0]) is nn.Conv2d and type(model[1]) is nn.BatchNorm2d
    assert RUNS not in model[0].__dict__ and RUNS not in model[1].__dict__
    assert _counted_batch_norms(model, inputs) == 1


def test_folded_parameters_are_the_batch_norm_of_the_layer_in_float64():
    torch.manual_seed(0)
    conv, bn = nn.Conv2d(3, 6, 3, groups=3, bias=True).double(), _with_statistics(nn.BatchNorm2d(6)).double()
    x = torch.randn(2, 3, 7, 7, dtype=torch.float64)
    weight, bias = folded_parameters(conv, bn)
    with torch.no_grad():
        assert torch.allclose(conv._conv_forward(x, weight, bias), bn(conv(x)), rtol=1e-12, atol=1e-12)
    linear, bn1 = nn.Linear(5, 4), _with_statistics(nn.BatchNorm1d(4))
    weight, bias = folded_parameters(linear, bn1)
    y = torch.randn(3, 5)
    with torch.no_grad():
        assert torch.allclose(nn.functional.linear(y, weight, bias), bn1(linear(y)), rtol=1e-5, atol=1e-5)


def test_resnet18_folds_every_batch_norm_its_convolution_feeds_alone():
    model = _with_statistics(cnn.get_model("resnet18", "tiny"))
    inputs = tuple(cnn.get_inputs("resnet18", "tiny"))
    with torch.no_grad():
        expected = model(*inputs)
    folding = fold_batch_norms(model, inputs)
    norms = [path for path, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert sorted(f.norm_path for f in folding.folds) == sorted(norms) and folding.rejected == {}
    assert _counted_batch_norms(model, inputs) == 0
    with torch.no_grad():
        assert output_error(expected, model(*inputs)) <= tolerance(expected)


class Leaky(nn.Module):
    """conv -> bn, with the convolution's output also read by `extra`."""

    def __init__(self, extra: str):
        super().__init__()
        self.conv, self.bn, self.extra = nn.Conv2d(2, 2, 3, padding=1), nn.BatchNorm2d(2), extra

    def forward(self, x):
        y = self.conv(x)
        out = self.bn(y)
        if self.extra == "residual":
            return out + y
        if self.extra == "returned":
            return out, y
        return out


@pytest.mark.parametrize("extra, why", [("residual", "conv: its output is used by add outside a consumer"),
                                        ("returned", "conv: its output is returned from the forward")])
def test_a_convolution_whose_output_is_read_elsewhere_keeps_its_batch_norm(extra, why):
    model = _with_statistics(Leaky(extra))
    inputs = (torch.randn(1, 2, 5, 5),)
    folding = fold_batch_norms(model, inputs)
    assert folding.folds == [] and folding.rejected == {"bn": why}
    assert _counted_batch_norms(model, inputs) == 1


def test_training_mode_is_refused_and_a_batch_norm_in_training_mode_is_not_folded():
    model = cnn.get_model("conv_bn_relu", "tiny").train()
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    with pytest.raises(ValueError, match="model.eval"):
        fold_batch_norms(model, inputs)
    model.eval()
    model[1].train()            # one batch norm left in training mode inside an eval model
    folding = fold_batch_norms(model, inputs)
    assert folding.folds == [] and "training mode" in folding.rejected["1"]


def test_a_folded_model_runs_unfolded_where_it_needs_gradients_or_is_put_back_in_training():
    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    folding = fold_batch_norms(model, inputs)
    assert len(folding.folds) == 1
    assert _counted_batch_norms_with_grad(model, inputs) == 1           # parameters need gradients: unfolded
    folding.eager = False
    assert _counted_batch_norms(model, inputs) == 1                     # off eagerly
    folding.eager = True
    model.train()
    assert _counted_batch_norms(model, inputs) == 1                     # training mode: batch statistics


def _counted_batch_norms_with_grad(model, inputs) -> int:
    calls = []
    real = torch.nn.functional.batch_norm
    torch.nn.functional.batch_norm = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        model(*inputs).sum().backward()
    finally:
        torch.nn.functional.batch_norm = real
    return len(calls)


def test_parameters_changed_after_folding_are_folded_again():
    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    fold_batch_norms(model, inputs)
    with torch.no_grad():
        model[1].running_mean.add_(3.0)
        folded = model(*inputs)
        expected = unfold_batch_norms(model)(*inputs)
    assert output_error(expected, folded) <= tolerance(expected)


def test_the_folded_model_compiles_to_the_same_output():
    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    with torch.no_grad():
        expected = model(*inputs)
    fold_batch_norms(model, inputs)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model, backend="aot_eager")(*inputs)
    finally:
        torch._dynamo.reset()
    assert output_error(expected, compiled) <= tolerance(expected)


def test_a_linear_feeding_a_batch_norm1d_folds_and_a_transposed_convolution_does_not():
    torch.manual_seed(0)
    mlp = _with_statistics(nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU()))
    x = torch.randn(3, 6)
    with torch.no_grad():
        expected = mlp(x)
    folding = fold_batch_norms(mlp, (x,))
    assert [(f.layer_path, f.norm_path) for f in folding.folds] == [("0", "1")]
    with torch.no_grad():
        assert output_error(expected, mlp(x)) <= tolerance(expected)
    up = _with_statistics(nn.Sequential(nn.ConvTranspose2d(2, 2, 2), nn.BatchNorm2d(2)))
    folding = fold_batch_norms(up, (torch.randn(1, 2, 4, 4),))
    assert folding.folds == [] and folding.rejected == {"1": "no convolution or linear feeds it"}


def test_a_fold_whose_forward_differs_from_the_models_is_undone_with_the_reason(monkeypatch):
    from autokernel.routing import bn_folding

    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    right = bn_folding.folded_parameters
    monkeypatch.setattr(bn_folding, "folded_parameters", lambda layer, norm: (right(layer, norm)[0], layer.bias))
    folding = fold_batch_norms(model, inputs)
    assert folding.folds == [] and "the folded forward differs from the model's by" in folding.rejected["1"]
    assert type(model[0]) is nn.Conv2d and _counted_batch_norms(model, inputs) == 1


def test_a_batch_norm_skips_only_the_tensor_its_own_layer_handed_it():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(2, 2, 3, padding=1), nn.BatchNorm2d(2)

        def forward(self, x, other=False):
            y = self.conv(x)
            return self.bn(x) if other else self.bn(y)     # found on the usual path; the other one still normalizes

    model = _with_statistics(Branchy())
    x = torch.randn(1, 2, 5, 5)
    with torch.no_grad():
        expected = model(x, other=True)
    assert len(fold_batch_norms(model, (x,)).folds) == 1
    with torch.no_grad():
        assert output_error(expected, model(x, other=True)) <= tolerance(expected)


def test_inside_a_dynamo_trace_the_compiled_flag_decides_unless_the_trace_is_of_the_eager_forward():
    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    folding = fold_batch_norms(model, inputs)
    folding.eager, folding.compiled = True, False
    graphs = []

    def batch_norms_in_graph(gm, example_inputs):
        graphs.append(sum("batch_norm" in str(node.target) for node in gm.graph.nodes))
        return gm.forward

    def traced(eager_trace: bool) -> int:
        folding.eager_trace = lambda: eager_trace
        torch._dynamo.reset()
        try:
            with torch.no_grad():
                torch.compile(model, backend=batch_norms_in_graph)(*inputs)
        finally:
            torch._dynamo.reset()
        return graphs.pop()
    assert traced(eager_trace=False) == 1          # a compiled variant: the compiled flag, off
    assert traced(eager_trace=True) == 0           # the eager forward traced (regions routed eagerly): eager, on


def test_the_folded_weights_are_static_inputs_to_a_compiled_graph_and_stay_where_they_are():
    # Under CUDA graphs an input not marked static is copied into the graph's memory before every replay.
    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    [fold] = fold_batch_norms(model, inputs).folds
    weight = fold.weight
    assert getattr(weight, "_dynamo_static_input_type", None) is not None
    assert getattr(fold.bias, "_dynamo_static_input_type", None) is not None
    with torch.no_grad():
        model[1].running_var.mul_(2.0)
        model(*inputs)
    assert fold.weight is weight          # folded again in place: a captured graph reads the new values


def test_a_compiled_folded_model_checks_few_more_guards_than_the_model_itself():
    # A forward patched on the instance cost ~29 guard lines a module (its closure's cells, its partial's function and
    # arguments), checked before every compiled call: ResNet-18 with 20 folds, 1865 -> 3043 lines (torch 2.13). Patched
    # modules swap their class instead (autokernel/core/patching.py): ~16 a module (2501), the run's record.
    model = _with_statistics(cnn.get_model("resnet18", "tiny"))
    inputs = tuple(cnn.get_inputs("resnet18", "tiny"))
    plain = guard_lines(model, inputs)
    folding = fold_batch_norms(model, inputs)
    folding.eager = folding.compiled = False
    patched = 2 * len(folding.folds)
    assert len(folding.folds) == 20
    assert guard_lines(model, inputs) <= plain + 20 * patched
    folding.compiled = True
    assert guard_lines(model, inputs) <= plain + 20 * patched


def test_plugged_in_after_the_fold_the_fold_still_runs_and_before_it_is_refused():
    from autokernel.routing import plugin

    model = _with_statistics(cnn.get_model("conv_bn_relu", "tiny"))
    inputs = tuple(cnn.get_inputs("conv_bn_relu", "tiny"))
    assert len(fold_batch_norms(model, inputs).folds) == 1
    original = model[0].forward
    model[0].forward = lambda x: original(x)      # what a router's patch is: a forward on the instance, over ours
    assert _counted_batch_norms(model, inputs) == 0
    unfold_batch_norms(model)
    model[0].forward = lambda x: nn.Conv2d.forward(model[0], x)
    folding = fold_batch_norms(model, inputs)
    assert folding.folds == [] and "fold first, then plug in" in folding.rejected["1"]
    assert _counted_batch_norms(model, inputs) == 1
    assert plugin.router_of(model) is None
