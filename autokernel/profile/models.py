"""Loading a user's model in every supported form, for profile, verify and `autokernel optimize`.

The forms, tried in this order for a model file:
  - `class_name` given: that class, built with no positional arguments (KernelBench's `Model` gets
    `get_init_inputs()`); inputs from `input_shape`, else from the file's `get_inputs()`;
  - `get_model()` and `get_inputs()`;
  - KernelBench: `class Model`, `get_inputs()`, `get_init_inputs()`, used as-is.
`hf="llama"` instead of a file builds a Hugging Face transformers architecture with random weights; an
encoder-decoder (T5, BART, Whisper) also gets random decoder tokens.

`model_kwargs` go to `get_model()` (or the class); `get_inputs()` receives those it names in its
signature (all of them if it takes **kwargs), so a choice like config="tiny" reaches both.
With `input_shape`, the inputs are random token ids when the model's first layer is an
nn.Embedding, else random floats. Every failure raises ModelLoadError with a message for the user.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import nn

from autokernel.core.dtypes import dtype_named

# The same seed for every load, so profile and verify see the same weights and inputs.
LOAD_SEED = 0
HF_DEFAULT_INPUT_SHAPE = (1, 512)
# An encoder-decoder's decoder tokens when its encoder reads no tokens (Whisper's spectrogram): a short reply, as
# when it transcribes.
HF_DECODER_TOKENS = 64

NO_GPU_HINT = ("load it on the CPU instead (device 'cpu'): the CPU path (Triton interpreter) still works for small "
               "models, but profiling then measures CPU op time and kernel timings won't be meaningful")

_module_counter = itertools.count()


class ModelLoadError(Exception):
    """A model could not be loaded; the message says why and what to do, for the user to read."""


@dataclass
class LoadedModel:
    model: nn.Module        # in eval mode, on device, in dtype
    inputs: tuple           # positional args for model(*inputs), on device
    name: str               # e.g. "llama.py:Model" or "hf:llama"
    dtype: torch.dtype
    device: torch.device


def parse_input_shape(text: str) -> tuple[int, ...]:
    """"1,512" -> (1, 512)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ModelLoadError(f"Bad --input-shape {text!r}: expected positive integers separated by commas, like 1,512.")
    return tuple(int(p) for p in parts)


def parse_model_arg(text: str) -> tuple[str, object]:
    """"config=tiny" -> ("config", "tiny"): one keyword for get_model()/the model class; numbers become int or float,
    true and false booleans (a config's switch given as the string "false" would be true)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ModelLoadError(f"Bad --model-arg {text!r}: expected NAME=VALUE, like config=tiny.")
    if value.strip().lower() in ("true", "false"):
        return name.strip(), value.strip().lower() == "true"
    for kind in (int, float):
        try:
            return name.strip(), kind(value)
        except ValueError:
            pass
    return name.strip(), value.strip()


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """"fp16" / "bfloat16" / torch.float32 -> the torch dtype; None stays None."""
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        return dtype
    if isinstance(dtype, str) and dtype_named(dtype) is not None:
        return dtype_named(dtype)
    raise ModelLoadError(f"Unknown dtype {dtype!r}: use one of fp16, bf16 or fp32.")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The requested device, or cuda when one is available and cpu otherwise."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise ModelLoadError(f"Unknown device {device!r}: use cuda, cuda:N or cpu.") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"No CUDA GPU is available, so the model cannot be placed on {device!r}; {NO_GPU_HINT}.")
    return resolved


def load_model(path: str | os.PathLike | None = None, *, class_name: str | None = None,
               input_shape: tuple[int, ...] | None = None, dtype: str | torch.dtype | None = None,
               hf: str | None = None, hf_overrides: dict | None = None, device: str | None = None,
               model_kwargs: dict | None = None) -> LoadedModel:
    """Build the model and its sample inputs on the device, check one forward pass, and return them.

    dtype None leaves the model and inputs in the dtype the file made them (usually float32).
    """
    if (path is None) == (hf is None):
        raise ModelLoadError("Give exactly one model: a model file (like models/llama.py) or --hf NAME (like llama).")
    if hf is not None and model_kwargs:     # --model-arg with --hf sets fields of the architecture's config
        hf_overrides = {**model_kwargs, **(hf_overrides or {})}
    target_dtype = parse_dtype(dtype)
    target_device = resolve_device(device)
    if hf is not None:
        return _build(_hf_recipe(hf, hf_overrides or {}, input_shape), target_dtype, target_device)
    file = check_model_file(Path(path))
    with _on_sys_path(file.parent):
        module = _import_file(file)
        recipe = _file_recipe(module, file, class_name, input_shape, model_kwargs or {})
        return _build(recipe, target_dtype, target_device)


@dataclass
class _Recipe:
    """How to make one model and its inputs; the inputs maker gets the built model."""
    label: str                                   # what the user asked for, for messages
    make_model: Callable[[], object]
    make_inputs: Callable[[nn.Module, torch.dtype | None], object]
    name: Callable[[nn.Module], str]


def _build(recipe: _Recipe, dtype: torch.dtype | None, device: torch.device) -> LoadedModel:
    stage = "building"
    try:
        torch.manual_seed(LOAD_SEED)
        # Under the device context, weights and inputs are made straight on the GPU, so a 7B
        # model never has to fit in host memory first.
        with torch.device(device):
            model = _call_user(recipe.make_model, f"Building the model from {recipe.label}")
            if not isinstance(model, nn.Module):
                raise ModelLoadError(f"{recipe.label} produced a {type(model).__name__}, not a torch.nn.Module.")
            model = model.to(device=device, dtype=dtype).eval()
            stage = "making the sample inputs for"
            raw_inputs = _call_user(lambda: recipe.make_inputs(model, dtype), f"Making the inputs for {recipe.label}")
            inputs = _place_inputs(raw_inputs, recipe.label, device, dtype)
            stage = "running one forward pass of"
            _check_forward(model, inputs, recipe.label, device)
    except ModelLoadError:
        raise
    except Exception as exc:
        if _is_out_of_memory(exc):
            raise _out_of_memory(recipe.label, stage, device) from exc
        raise
    return LoadedModel(model=model, inputs=inputs, name=recipe.name(model),
                       dtype=dtype or _model_dtype(model, inputs), device=device)


def _call_user(fn: Callable[[], object], what: str) -> object:
    """Run user code, turning its exceptions (other than running out of memory) into one message."""
    try:
        return fn()
    except ModelLoadError:
        raise
    except Exception as exc:
        if _is_out_of_memory(exc):
            raise
        raise ModelLoadError(f"{what} failed: {_describe(exc)}.") from exc


def _check_forward(model: nn.Module, inputs: tuple, label: str, device: torch.device) -> None:
    def forward():
        with torch.no_grad():
            model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # so a device-side error surfaces here, not later
    try:
        _call_user(forward, f"The forward pass of {label}")
    except ModelLoadError as exc:
        shapes = ", ".join(_describe_input(i) for i in inputs) or "no inputs"
        raise ModelLoadError(f"{exc} The sample inputs were ({shapes}); check that get_inputs() "
                             "or --input-shape matches what forward() expects.") from exc.__cause__


def _out_of_memory(label: str, stage: str, device: torch.device) -> ModelLoadError:
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return ModelLoadError(f"Ran out of memory on {device} while {stage} {label}; try a smaller --input-shape "
                          "or a smaller model config.")


def _is_out_of_memory(exc: BaseException) -> bool:
    # Older torch raises a plain RuntimeError for CUDA, and the CPU allocator says "can't allocate".
    text = str(exc).lower()
    return (isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError))
            or "out of memory" in text or "can't allocate memory" in text)


def _describe(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0].rstrip('.')}" if lines else type(exc).__name__


def _describe_input(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    return repr(value)


def _place_inputs(raw: object, label: str, device: torch.device, dtype: torch.dtype | None) -> tuple:
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if not isinstance(raw, (list, tuple)):
        raise ModelLoadError(f"The inputs for {label} are a {type(raw).__name__}; get_inputs() must return a "
                             "list of forward() arguments.")
    return tuple(_place_tensor(v, device, dtype) if isinstance(v, torch.Tensor) else v for v in raw)


def _place_tensor(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None) -> torch.Tensor:
    # Only floating inputs follow the model's dtype: token ids, targets and masks keep theirs.
    if dtype is not None and tensor.is_floating_point():
        return tensor.to(device=device, dtype=dtype)
    return tensor.to(device)


def _model_dtype(model: nn.Module, inputs: tuple) -> torch.dtype:
    tensors = itertools.chain(model.parameters(), model.buffers(), (i for i in inputs if isinstance(i, torch.Tensor)))
    return next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)


def _random_inputs(model: nn.Module, shape: tuple[int, ...], dtype: torch.dtype | None) -> tuple:
    """Token ids below the vocabulary size when the first layer is an embedding, else random floats.

    Called inside the loader's device context, so the tensors are made on the model's device.
    """
    first_layer = next(m for m in model.modules() if next(m.children(), None) is None)
    if isinstance(first_layer, nn.Embedding):
        return (torch.randint(0, first_layer.num_embeddings, shape),)
    return (torch.randn(shape, dtype=dtype or _model_dtype(model, ())),)


# --------------------------------------------------------------------------- model files
def check_model_file(file: Path) -> Path:
    """The model file resolved, or ModelLoadError when there is none or it is not a .py file."""
    if not file.exists():
        raise ModelLoadError(f"Model file not found: {file}; check the path, or use --hf NAME to build a "
                             "Hugging Face architecture instead.")
    if file.is_dir() or file.suffix != ".py":
        raise ModelLoadError(f"{file} is not a Python file; a model file is a .py file that defines get_model() and "
                             "get_inputs(), or a KernelBench Model with get_inputs() and get_init_inputs().")
    return file.resolve()


@contextlib.contextmanager
def _on_sys_path(folder: Path) -> Iterator[None]:
    """The model file's folder on sys.path, so its imports of sibling files work."""
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))


def _import_file(file: Path):
    # A fresh module name per load: two files called model.py, or one file loaded twice, never collide.
    module_name = f"autokernel_user_model_{next(_module_counter)}_{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ModelLoadError(f"Importing {file.name} failed: {_describe(exc)}.") from exc
    return module


def _file_recipe(module, file: Path, class_name: str | None, input_shape: tuple[int, ...] | None,
                 model_kwargs: dict) -> _Recipe:
    get_inputs = getattr(module, "get_inputs", None)
    if class_name is not None:
        model_class = getattr(module, class_name, None)
        if not (isinstance(model_class, type) and issubclass(model_class, nn.Module)):
            raise ModelLoadError(f"{file.name} has no nn.Module class named {class_name!r}; its nn.Module classes: "
                                 f"{_module_classes(module)}.")
    elif callable(getattr(module, "get_model", None)):
        model_class = None
    elif isinstance(getattr(module, "Model", None), type) and callable(get_inputs):
        model_class = module.Model
    else:
        raise ModelLoadError(
            f"No model found in {file.name}: looked for get_model() with get_inputs(), and for a KernelBench "
            f"class Model with get_inputs() (and get_init_inputs()); its nn.Module classes: {_module_classes(module)}. "
            "To use one of those, pass --class-name NAME and --input-shape.")

    if model_class is None:
        make_model, label = (lambda: module.get_model(**model_kwargs)), file.name
    else:
        make_model = lambda: model_class(*_init_args(module, model_class), **model_kwargs)
        label = f"{file.name}:{model_class.__name__}"

    if input_shape is not None:
        make_inputs = lambda model, dtype: _random_inputs(model, tuple(input_shape), dtype)
    elif callable(get_inputs):
        make_inputs = lambda model, dtype: get_inputs(**_kwargs_accepted_by(get_inputs, model_kwargs))
    else:
        raise ModelLoadError(f"{file.name} has no get_inputs(), so the model's inputs are unknown; pass "
                             "--input-shape (like 1,512).")
    return _Recipe(label=label, make_model=make_model, make_inputs=make_inputs,
                   name=lambda model: f"{file.name}:{type(model).__name__}")


def _init_args(module, model_class: type) -> list:
    """KernelBench's Model is built from get_init_inputs(); any other class with no arguments."""
    get_init_inputs = getattr(module, "get_init_inputs", None)
    if model_class is getattr(module, "Model", None) and callable(get_init_inputs):
        return list(get_init_inputs())
    return []


def _module_classes(module) -> str:
    names = [name for name, value in vars(module).items()
             if isinstance(value, type) and issubclass(value, nn.Module) and value.__module__ == module.__name__]
    return ", ".join(names) or "none"


def _kwargs_accepted_by(fn: Callable, kwargs: dict) -> dict:
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


# --------------------------------------------------------------------------- Hugging Face
def _hf_recipe(architecture: str, overrides: dict, input_shape: tuple[int, ...] | None) -> _Recipe:
    try:
        import transformers
        from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                            MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    except ImportError as exc:
        raise ModelLoadError(f"Building hf:{architecture} needs the transformers package, which is not installed; "
                             "run `pip install transformers` (or `pip install -e .[hf]`).") from exc
    # The profile is of one forward pass: a key-value cache would only add copies to it.
    fields = {"use_cache": False, **overrides}
    try:
        config = transformers.AutoConfig.for_model(architecture, **fields)
    except (ValueError, KeyError) as exc:
        raise ModelLoadError(f"transformers has no architecture called {architecture!r}; use a model type such as "
                             "llama, mistral, gpt2 or bert.") from exc
    # Encoder-only families (BERT) appear in both maps: they get the bare encoder, like models/bert.py. So do
    # encoder-decoders: Whisper's causal LM is its decoder alone, which would never see the audio.
    is_decoder_lm = (config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                     and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
                     and not getattr(config, "is_encoder_decoder", False))
    auto_class = transformers.AutoModelForCausalLM if is_decoder_lm else transformers.AutoModel
    shape = tuple(input_shape) if input_shape is not None else HF_DEFAULT_INPUT_SHAPE
    return _Recipe(label=f"hf:{architecture}", make_model=lambda: auto_class.from_config(config),
                   make_inputs=lambda model, dtype: _hf_inputs(model, config, shape, dtype),
                   name=lambda model: f"hf:{architecture}")


def _hf_inputs(model: nn.Module, config, shape: tuple[int, ...], dtype: torch.dtype | None) -> tuple:
    """The encoder's random input of `shape`; for an encoder-decoder, its decoder's tokens too, as the positional
    argument forward() names decoder_input_ids (None for the arguments before it): without them T5, BART and
    Whisper refuse to run. The decoder reads as many tokens as the encoder when the encoder reads tokens, else
    HF_DECODER_TOKENS (at most the decoder's positions)."""
    inputs = _random_inputs(model, shape, dtype)
    parameters = list(inspect.signature(model.forward).parameters)
    if not getattr(config, "is_encoder_decoder", False) or "decoder_input_ids" not in parameters:
        return inputs
    encoder_input = inputs[0]
    if encoder_input.is_floating_point():
        length = min(HF_DECODER_TOKENS, getattr(config, "max_target_positions", None) or HF_DECODER_TOKENS)
        decoder_shape = (encoder_input.shape[0], length)
    else:
        decoder_shape = tuple(encoder_input.shape)
    decoder_ids = torch.randint(0, config.vocab_size, decoder_shape)
    gap = parameters.index("decoder_input_ids") - len(inputs)
    return (*inputs, *([None] * gap), decoder_ids)
