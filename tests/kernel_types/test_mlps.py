"""autokernel/kernel_types/mlps.py: a gated MLP's activation is read from the activation module it holds."""

from torch import nn

from autokernel.kernel_types import mlps


def test_an_mlps_activation_is_read_from_the_module_it_holds():
    class HoldsActivation(nn.Module):
        def __init__(self, act):
            super().__init__()
            self.act_fn = act
    assert mlps.mlp_activation(HoldsActivation(nn.SiLU())) == "silu"
    # Hugging Face's own activation classes, by name.
    assert mlps.mlp_activation(HoldsActivation(type("SiLUActivation", (nn.Module,), {})())) == "silu"
    assert mlps.mlp_activation(HoldsActivation(type("GELUTanh", (nn.Module,), {})())) == "gelu"
    assert mlps.mlp_activation(HoldsActivation(nn.GELU(approximate="tanh"))) == "gelu"
    # The exact GELU is no kernel's: its name goes into the shape, which then matches no verified shape.
    assert mlps.mlp_activation(HoldsActivation(nn.GELU())) == "GELU"
    assert mlps.mlp_activation(nn.Module()) == "silu"
