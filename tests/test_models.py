"""Tests for autokernel/profile/models.py (every loading form and failure) and the shipped models in models/."""

import importlib.util
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

import reference
from autokernel.profile.models import LoadedModel, ModelLoadError, load_model, parse_dtype, parse_input_shape

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
TINY_SHAPE = (2, 16)


def write_model(folder: Path, source: str, name: str = "model.py") -> Path:
    file = folder / name
    file.write_text(textwrap.dedent(source))
    return file


def import_shipped(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"shipped_{name}", MODELS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_error(**kwargs) -> str:
    with pytest.raises(ModelLoadError) as caught:
        load_model(**{"device": "cpu", **kwargs})
    return str(caught.value)


KERNELBENCH_PROBLEM = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_features, num_classes):
            super(Model, self).__init__()
            self.fc = nn.Linear(in_features, num_classes)

        def forward(self, x, targets):
            return torch.nn.functional.cross_entropy(self.fc(x), targets)

    batch_size = 8
    in_features = 32
    num_classes = 10

    def get_inputs():
        return [torch.randn(batch_size, in_features), torch.randint(0, num_classes, (batch_size,))]

    def get_init_inputs():
        return [in_features, num_classes]
"""

CLASSES_ONLY = """
    import torch
    from torch import nn

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(37, 8)
            self.out = nn.Linear(8, 37)

        def forward(self, ids):
            return self.out(self.embed(ids))

    class Regressor(nn.Module):
        def __init__(self, width=12):
            super().__init__()
            self.fc = nn.Linear(width, 3)

        def forward(self, x):
            return self.fc(x)
"""


# --------------------------------------------------------------------------- parsing
def test_parse_input_shape():
    assert parse_input_shape("1,512") == (1, 512)
    assert parse_input_shape(" 2, 3 ,4 ") == (2, 3, 4)
    for bad in ["", "1,x", "1,-2", "0,4", "1.5"]:
        with pytest.raises(ModelLoadError, match="expected positive integers"):
            parse_input_shape(bad)


def test_parse_dtype():
    assert parse_dtype("fp16") is torch.float16
    assert parse_dtype("BF16") is torch.bfloat16
    assert parse_dtype(torch.float32) is torch.float32
    assert parse_dtype(None) is None
    for bad in ["int8", torch.int64]:
        with pytest.raises(ModelLoadError, match="use one of fp16, bf16 or fp32"):
            parse_dtype(bad)


# --------------------------------------------------------------------------- loading forms
def test_kernelbench_file_works_as_is(tmp_path):
    loaded = load_model(write_model(tmp_path, KERNELBENCH_PROBLEM, "95_CrossEntropyLoss.py"), device="cpu")
    assert isinstance(loaded, LoadedModel)
    assert loaded.name == "95_CrossEntropyLoss.py:Model"
    assert loaded.model.fc.in_features == 32 and loaded.model.fc.out_features == 10   # from get_init_inputs()
    assert not loaded.model.training
    x, targets = loaded.inputs
    assert x.shape == (8, 32) and x.dtype is torch.float32 and targets.dtype is torch.int64
    assert loaded.dtype is torch.float32 and loaded.device == torch.device("cpu")
    assert loaded.model(*loaded.inputs).ndim == 0


def test_dtype_casts_model_and_floating_inputs_only(tmp_path):
    loaded = load_model(write_model(tmp_path, KERNELBENCH_PROBLEM), device="cpu", dtype="bf16")
    x, targets = loaded.inputs
    assert x.dtype is torch.bfloat16 and targets.dtype is torch.int64
    assert loaded.model.fc.weight.dtype is torch.bfloat16 and loaded.dtype is torch.bfloat16


def test_same_file_loads_the_same_weights_and_inputs_twice(tmp_path):
    file = write_model(tmp_path, KERNELBENCH_PROBLEM)
    first, second = load_model(file, device="cpu"), load_model(file, device="cpu")
    assert torch.equal(first.model.fc.weight, second.model.fc.weight)
    assert torch.equal(first.inputs[0], second.inputs[0])


def test_get_model_file_with_sibling_import_and_kwargs_reaching_get_inputs(tmp_path):
    write_model(tmp_path, """
        from torch import nn
        class Scale(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.fc = nn.Linear(width, width)
            def forward(self, x):
                return self.fc(x) * 2
    """, "my_layers.py")
    file = write_model(tmp_path, """
        import torch
        from my_layers import Scale
        def get_model(width=4):
            return Scale(width)
        def get_inputs(width=4):
            return torch.randn(3, width)
    """)
    loaded = load_model(file, device="cpu", model_kwargs={"width": 6})
    assert loaded.name == "model.py:Scale"
    assert loaded.inputs[0].shape == (3, 6)   # a lone tensor from get_inputs() becomes a 1-tuple
    assert str(tmp_path) not in sys.path


def test_class_name_with_input_shape_makes_token_ids_for_an_embedding_model(tmp_path):
    loaded = load_model(write_model(tmp_path, CLASSES_ONLY), class_name="TinyLM", input_shape=(3, 20), device="cpu")
    (ids,) = loaded.inputs
    assert ids.dtype is torch.int64 and ids.shape == (3, 20)
    assert 0 <= int(ids.min()) and int(ids.max()) < 37
    assert loaded.name == "model.py:TinyLM"


def test_class_name_with_input_shape_makes_floats_for_other_models(tmp_path):
    loaded = load_model(write_model(tmp_path, CLASSES_ONLY), class_name="Regressor", input_shape=(5, 12),
                        dtype="bf16", device="cpu")
    (x,) = loaded.inputs
    assert x.dtype is torch.bfloat16 and x.shape == (5, 12)
    assert loaded.model(x).shape == (5, 3)


def test_input_shape_overrides_get_inputs():
    loaded = load_model(MODELS_DIR / "custom.py", input_shape=(2, 8, 512), device="cpu")
    assert [tuple(i.shape) for i in loaded.inputs] == [(2, 8, 512)]


# --------------------------------------------------------------------------- failures
def test_missing_file():
    assert "Model file not found: no_such_model.py" in load_error(path="no_such_model.py")


def test_not_a_python_file(tmp_path):
    weights = tmp_path / "weights.pt"
    weights.write_bytes(b"\0")
    assert "is not a Python file" in load_error(path=weights)
    assert "is not a Python file" in load_error(path=tmp_path)


def test_no_model_lists_what_it_looked_for_and_the_classes_found(tmp_path):
    message = load_error(path=write_model(tmp_path, CLASSES_ONLY))
    assert "No model found in model.py" in message
    assert "get_model()" in message and "class Model" in message and "get_inputs()" in message
    assert "TinyLM, Regressor" in message and "--class-name NAME" in message


def test_unknown_class_name(tmp_path):
    message = load_error(path=write_model(tmp_path, CLASSES_ONLY), class_name="Nope", input_shape=(1, 2))
    assert "no nn.Module class named 'Nope'" in message and "TinyLM, Regressor" in message


def test_class_name_without_inputs_asks_for_input_shape(tmp_path):
    assert "pass --input-shape" in load_error(path=write_model(tmp_path, CLASSES_ONLY), class_name="TinyLM")


def test_import_failure(tmp_path):
    message = load_error(path=write_model(tmp_path, "import torch\nimport no_such_package_xyz\n"))
    assert "Importing model.py failed: ModuleNotFoundError" in message and "no_such_package_xyz" in message


def test_constructor_raised(tmp_path):
    file = write_model(tmp_path, """
        from torch import nn
        class Model(nn.Module):
            def __init__(self, width):
                super().__init__()
                raise ValueError("width must be even, got 3")
        def get_inputs():
            return []
        def get_init_inputs():
            return [3]
    """)
    message = load_error(path=file)
    assert "Building the model from model.py:Model failed: ValueError: width must be even, got 3" in message


def test_get_model_returning_something_else(tmp_path):
    file = write_model(tmp_path, "def get_model():\n    return 42\ndef get_inputs():\n    return []\n")
    assert "produced a int, not a torch.nn.Module" in load_error(path=file)


def test_forward_raised_shows_the_error_and_the_inputs(tmp_path):
    message = load_error(path=write_model(tmp_path, CLASSES_ONLY), class_name="Regressor", input_shape=(5, 7))
    assert "The forward pass of model.py:Regressor failed: RuntimeError" in message
    assert "float32 (5, 7)" in message and "--input-shape" in message


def test_out_of_memory_suggests_smaller_inputs(tmp_path):
    file = write_model(tmp_path, """
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        def get_inputs():
            return [torch.zeros(2)]
    """)
    message = load_error(path=file)
    assert "Ran out of memory on cpu while running one forward pass of model.py:Model" in message
    assert "smaller --input-shape" in message and "smaller model config" in message


def test_cuda_without_a_gpu_points_to_the_cpu_path(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    message = load_error(path=MODELS_DIR / "gpt2.py", device="cuda")
    assert "No CUDA GPU is available" in message and "on the CPU instead" in message
    assert "CPU op time" in message and "timings won't be meaningful" in message


def test_exactly_one_model_source():
    assert "exactly one model" in load_error()
    assert "exactly one model" in load_error(path=MODELS_DIR / "gpt2.py", hf="gpt2")


# --------------------------------------------------------------------------- shipped models
@pytest.mark.parametrize("name, output_width", [("gpt2", 1000), ("llama", 1000), ("bert", 64)])
def test_shipped_model_tiny_config_runs_on_cpu(name, output_width):
    loaded = load_model(MODELS_DIR / f"{name}.py", model_kwargs={"config": "tiny"}, input_shape=TINY_SHAPE,
                        device="cpu")
    assert loaded.name == f"{name}.py:Model"
    with torch.no_grad():
        assert loaded.model(*loaded.inputs).shape == (*TINY_SHAPE, output_width)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_shipped_get_inputs_follow_the_config(name):
    module = import_shipped(name)
    (ids,) = module.get_inputs(config="tiny")
    assert ids.shape == (1, 512) and ids.dtype is torch.int64 and int(ids.max()) < 1000
    assert module.get_init_inputs() == []
    with pytest.raises(ValueError, match="unknown config 'huge'"):
        module.get_model(config="huge")


@pytest.mark.parametrize("name, config, parameters", [
    ("gpt2", "default", 124_439_808),      # GPT-2 small, output head tied to the embedding
    ("llama", "7b", 6_738_415_616),        # LLaMA-7B
    ("bert", "default", 108_891_648),      # BERT-base without the pooler
])
def test_full_size_configs_have_the_published_parameter_counts(name, config, parameters):
    with torch.device("meta"):   # shapes only: nothing is allocated
        model = import_shipped(name).get_model(config=config)
    assert sum(p.numel() for p in model.parameters()) == parameters


def test_llama_7b_dimensions():
    config = import_shipped("llama").CONFIGS["7b"]
    assert (config.n_layers, config.dim, config.intermediate_size, config.n_heads, config.vocab_size) == \
        (32, 4096, 11008, 32, 32000)


@pytest.mark.parametrize("name, causal", [("gpt2", True), ("llama", True), ("bert", False)])
def test_attention_direction(name, causal):
    model = import_shipped(name).get_model(config="tiny").eval()
    ids = torch.randint(0, 1000, (1, 12))
    changed_last = ids.clone()
    changed_last[0, -1] = (ids[0, -1] + 1) % 1000
    with torch.no_grad():
        earlier_unchanged = torch.allclose(model(ids)[:, :-1], model(changed_last)[:, :-1])
    assert earlier_unchanged == causal


def test_llama_modules_compute_their_references():
    llama = import_shipped("llama")
    x = torch.randn(2, 3, 10, 16)
    rotary = llama.RotaryEmbedding(head_dim=16, max_seq_len=32, theta=10000.0)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, dtype=torch.float32) * 2 / 16))
    angles = torch.arange(10, dtype=torch.float32)[:, None] * inv_freq[None, :]
    torch.testing.assert_close(rotary(x), reference.rotary_embedding(x, angles.cos(), angles.sin()))

    norm = llama.RMSNorm(16, eps=1e-6)
    torch.nn.init.normal_(norm.weight)
    torch.testing.assert_close(norm(x), reference.rmsnorm(x, norm.weight, norm.eps))

    mlp = llama.SwiGLU(16, 24)
    torch.testing.assert_close(mlp(x), reference.fused_mlp(
        x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, "silu"))


def test_llama_rejects_sequences_longer_than_its_rotary_table():
    model = import_shipped("llama").get_model(config="tiny", max_seq_len=8)
    with pytest.raises(ValueError, match="longer than max_seq_len 8"):
        model(torch.zeros(1, 9, dtype=torch.int64))


@pytest.mark.parametrize("class_name", [None, "Model"])
def test_custom_template_loads_in_both_forms(class_name):
    loaded = load_model(MODELS_DIR / "custom.py", class_name=class_name, device="cpu")
    with torch.no_grad():
        probabilities = loaded.model(*loaded.inputs)
    assert probabilities.shape == (4, 100)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(4))
