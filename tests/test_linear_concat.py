"""Linears that read the same input run as one GEMM: the same outputs, inference only, refused elsewhere."""

import pytest
import torch
from torch import nn

from autokernel.core import patching
from autokernel.routing.linear_concat import concat_linears, concat_of, unconcat_linears
from autokernel.routing.outputs import output_error, tolerance


class TinyBlock(nn.Module):
    """A LLaMA-style block: grouped-query attention (q wider than k and v) and a gated MLP."""

    def __init__(self, dim=16, kv=8, hidden=24):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False), nn.Linear(dim, kv, bias=False),
                                          nn.Linear(dim, kv, bias=False), nn.Linear(dim, dim, bias=False))
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 2, -1).transpose(1, 2)            # what Hugging Face's attention does with them
        k = self.k(x).view(b, s, 1, -1).transpose(1, 2).repeat_interleave(2, dim=1)
        v = self.v(x).view(b, s, 1, -1).transpose(1, 2).repeat_interleave(2, dim=1)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        return h + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))



def _patched(module: nn.Module) -> bool:
    return bool(patching.runs_of(module)) or type(module) is not patching.original_class(type(module))

def _linear_calls(model: nn.Module, *inputs, grad: bool = False) -> tuple[int, object]:
    """The GEMMs one forward makes (F.linear calls), and its output."""
    calls, real = [], torch.nn.functional.linear

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    torch.nn.functional.linear = counting
    try:
        with torch.set_grad_enabled(grad):
            output = model(*inputs)
    finally:
        torch.nn.functional.linear = real
    return len(calls), output


def _reference(model: nn.Module, *inputs):
    with torch.no_grad():
        return model(*inputs)


def test_the_attention_projections_and_the_gated_mlp_run_as_two_gemms_with_the_same_output():
    model, x = TinyBlock().eval(), torch.randn(2, 5, 16)
    expected = _reference(model, x)
    parameters = {name: p.detach().clone() for name, p in model.named_parameters()}
    identities = [id(p) for p in model.parameters()]
    concat = concat_linears(model, (x,))
    assert [g.paths for g in concat.groups] == [["q", "k", "v"], ["gate", "up"]] and concat.rejected == {}
    calls, output = _linear_calls(model, x)
    assert calls == 4 and concat.hits == 2            # 7 linears: q+k+v and gate+up fused, o and down as they are
    assert output_error(expected, output) <= tolerance(expected)
    # The same parameters (objects and values), and no memory added: each weight is a view of its group's one.
    assert [id(p) for p in model.parameters()] == identities
    assert all(torch.equal(p, parameters[name]) for name, p in model.named_parameters())
    assert all(linear.weight.untyped_storage().data_ptr() == group.weight.untyped_storage().data_ptr()
               for group in concat.groups for linear in group.linears)
    unconcat_linears(model)
    assert concat_of(model) is None and not any(_patched(m) for m in model.modules())
    assert model.q.weight.untyped_storage().data_ptr() != model.k.weight.untyped_storage().data_ptr()
    assert _linear_calls(model, x)[0] == 7


def test_a_tiny_hugging_face_llama_fuses_every_layer_and_keeps_its_logits():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model, ids = transformers.LlamaForCausalLM(config).eval(), torch.randint(0, 64, (1, 8))
    expected = _reference(model, ids).logits
    concat = concat_linears(model, (ids,))
    assert [g.paths for g in concat.groups] == [
        paths for i in range(2) for paths in ([f"model.layers.{i}.self_attn.{p}_proj" for p in "qkv"],
                                              [f"model.layers.{i}.mlp.{p}_proj" for p in ("gate", "up")])]
    assert output_error(expected, _reference(model, ids).logits) <= tolerance(expected)


class Crossed(nn.Module):
    """q and v read x; k reads a tensor equal to x but not x; `reuse` calls q again on another input."""

    def __init__(self, reuse=False):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.reuse = reuse

    def forward(self, x, y):
        out = self.q(x) + self.k(x.clone()) * self.v(x)
        return out + self.q(y) if self.reuse else out


def test_linears_that_read_equal_but_different_tensors_are_not_grouped():
    model, x, y = Crossed().eval(), torch.randn(3, 8), torch.randn(3, 8)
    concat = concat_linears(model, (x, y))
    assert [g.paths for g in concat.groups] == [["q", "v"]]
    assert concat.rejected == {}              # k shares no input with them: nothing to say about it


class Temporaries(nn.Module):
    """Each linear reads a temporary of the same shape, freed before the next is made (CPython reuses its id)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return self.a(x + 1) + self.b(x + 2)


def test_temporaries_that_follow_one_another_are_not_one_input():
    assert concat_linears(Temporaries().eval(), (torch.randn(3, 8),)).groups == []


def test_a_linear_reused_on_another_input_is_not_grouped_and_the_model_stays_correct():
    model, x, y = Crossed(reuse=True).eval(), torch.randn(3, 8), torch.randn(3, 8)
    expected = _reference(model, x, y)
    concat = concat_linears(model, (x, y))
    assert concat.groups == [] and "not every input" in concat.rejected["q"]
    assert output_error(expected, _reference(model, x, y)) <= tolerance(expected)


class Shared(nn.Module):
    """a and b read x; with `other`, b reads y instead (a call the watched forward never showed)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 6)

    def forward(self, x, y=None, bump=False):
        first = self.a(x)
        if bump:
            x.mul_(2.0)                       # the shared input changed in place between the two projections
        return first, self.b(x if y is None else y)


def test_a_sibling_called_on_another_input_or_on_a_changed_one_computes_its_own_output():
    model, x, y = Shared().eval(), torch.randn(3, 8), torch.randn(3, 8)
    assert [g.paths for g in concat_linears(model, (x,)).groups] == [["a", "b"]]
    for args in ((x, y), (x.clone(), None, True)):
        expected = _reference(unconcat_linears(model), *[a.clone() if isinstance(a, torch.Tensor) else a
                                                         for a in args])
        concat_linears(model, (x,))
        assert output_error(expected, _reference(model, *args)) <= tolerance(expected)


def test_training_mode_is_refused_and_a_forward_that_needs_gradients_runs_unfused():
    model, x = TinyBlock(), torch.randn(1, 4, 16)
    with pytest.raises(ValueError, match="model.eval"):
        concat_linears(model, (x,))
    model.eval()
    concat = concat_linears(model, (x,))
    calls, output = _linear_calls(model, x, grad=True)
    assert calls == 7 and concat.hits == 0
    output.sum().backward()
    assert model.k.weight.grad is not None and model.k.weight.grad.abs().sum() > 0
    model.train()
    assert _linear_calls(model, x)[0] == 7                # training mode: as it is
    model.eval()
    concat.eager = False
    assert _linear_calls(model, x)[0] == 7                # off eagerly
    concat.eager = True
    assert _linear_calls(model, x)[0] == 4


class Flattening(nn.Module):
    """Merges a projection's last dimension with the one before by .view: its output must be contiguous."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return self.a(x).view(x.shape[0], -1) + self.b(x).view(x.shape[0], -1)


def test_a_fused_forward_that_raises_or_differs_is_undone_with_the_reason(monkeypatch):
    from autokernel.routing import linear_concat

    model, x = Flattening().eval(), torch.randn(2, 3, 8)
    concat = concat_linears(model, (x,))
    assert concat.groups == [] and "the fused forward raises RuntimeError: view size" in concat.rejected["a"]
    assert not any(_patched(m) for m in model.modules())
    assert model.a.weight.untyped_storage().data_ptr() != model.b.weight.untyped_storage().data_ptr()
    block, x = TinyBlock().eval(), torch.randn(1, 4, 16)
    fuse = linear_concat._fuse

    def wrong(paths, linears):
        group = fuse(paths, linears)
        group.weight = group.weight * 1.5
        return group
    monkeypatch.setattr(linear_concat, "_fuse", wrong)
    concat = concat_linears(block, (x,))
    assert concat.groups == [] and "the fused forward differs from the model's by" in concat.rejected["q"]
    assert _linear_calls(block, x)[0] == 7


def test_weights_loaded_in_place_are_fused_and_a_weight_replaced_breaks_its_group_eagerly():
    model, x = TinyBlock().eval(), torch.randn(1, 4, 16)
    concat_linears(model, (x,))
    torch.manual_seed(3)
    fresh = TinyBlock().eval()
    with torch.no_grad():
        fresh.q.weight.mul_(2.0)
    model.load_state_dict(fresh.state_dict())             # copied into the views: the fused weight sees it
    expected = _reference(fresh, x)
    calls, output = _linear_calls(model, x)
    assert calls == 4 and output_error(expected, output) <= tolerance(expected)
    model.k.weight = nn.Parameter(torch.randn(8, 16))     # a new tensor: the group no longer holds it
    with torch.no_grad():
        fresh.k.weight.copy_(model.k.weight)
    expected = _reference(fresh, x)
    calls, output = _linear_calls(model, x)
    assert calls == 6 and output_error(expected, output) <= tolerance(expected)


def test_the_fused_model_traces_in_one_graph_with_fewer_gemms_and_the_same_output():
    model, x = TinyBlock().eval(), torch.randn(2, 5, 16)
    expected = _reference(model, x)
    concat = concat_linears(model, (x,))
    linears = []

    def count_linears(gm, example_inputs):
        linears.append(sum("linear" in str(node.target) for node in gm.graph.nodes))
        return gm.forward
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model, backend=count_linears, fullgraph=True)(x)
            assert output_error(expected, compiled) <= tolerance(expected)
            concat.compiled = False          # the flag is guarded on: a graph of the unfused forward
            torch.compile(model, backend=count_linears, fullgraph=True)(x)
            concat.compiled = True
            assert output_error(expected, torch.compile(model, backend="eager")(x)) <= tolerance(expected)
    finally:
        torch._dynamo.reset()
    assert linears == [4, 7]
    assert all(slot is None for group in concat.groups for slot in group.slots)   # nothing kept after the graph


def test_the_rewrite_is_public_as_batch_norm_folding_is():
    import autokernel

    assert autokernel.concat_linears is concat_linears and autokernel.unconcat_linears is unconcat_linears


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder on a padded batch: its layers run on a nested tensor, their linears too."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 1)

    def forward(self, x):
        padding = torch.zeros(x.shape[:2], dtype=torch.bool)
        padding[:, -2:] = True
        return self.encoder(x, src_key_padding_mask=padding)


def test_linears_called_with_a_nested_tensor_are_left_as_they_are():
    # Before: "NestedTensorImpl doesn't support sizes" from the watched forward, and the rewrite was dropped.
    model, x = PaddedEncoder().eval(), torch.randn(2, 6, 16)
    expected = _reference(model, x)
    concat = concat_linears(model, (x,))
    assert concat.groups == []
    assert output_error(expected, _reference(model, x)) <= tolerance(expected)
