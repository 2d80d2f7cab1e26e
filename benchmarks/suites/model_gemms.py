"""Every distinct GEMM of the five benchmark models, read from the models themselves (built on the meta device).

The models of issue 26's bar: models/llama.py at 4 x 1024 and 1 x 512, a Hugging Face LLaMA with
grouped-query attention at 4 x 1024 built from a config (its k and v projections are 512 wide),
models/gpt2.py and models/bert.py at 1 x 512. Each nn.Linear is a "plain" GEMM (M tokens, N out
features, K in features); each gated MLP also gives the "dual" GEMM that computes its gate and up
projections together (the engine's SwiGLU plan). `--tiny` gives the same models at their CPU test
sizes, for the scripts' dry runs.

    python benchmarks/kernels.py model-gemms [--tiny]      # prints the table of shapes
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from benchmarks.common import ROOT  # noqa: E402

from autokernel.core.kernel_file import import_file  # noqa: E402
from autokernel.kernel_types.mlps import mlp_linears  # noqa: E402

# The Hugging Face model of benchmarks/end_to_end.py models (HF_GQA), as a config.
HF_GQA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
              num_key_value_heads=4, max_position_embeddings=4096, use_cache=False)
HF_GQA_TINY = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=128, vocab_size=1000, use_cache=False)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    tokens: int                  # M: batch x sequence
    build: object                # () -> nn.Module, called under the meta device


@dataclass
class Gemm:
    M: int
    N: int
    K: int
    kind: str                                   # "plain" (an nn.Linear) or "dual" (a gated MLP's gate and up)
    uses: list = field(default_factory=list)    # "model: module path" of every site

    @property
    def key(self) -> tuple:
        return (self.M, self.N, self.K, self.kind)

    def label(self) -> str:
        return f"{self.M}x{self.N}x{self.K}" + (" dual" if self.kind == "dual" else "")


def _our_model(file: str, config: str | None, **args):
    module = import_file(ROOT / "models" / file, f"_bench_model_{Path(file).stem}")
    return lambda: module.get_model(**({"config": config} if config else {}), **args)


def _hf_llama(fields: dict):
    def build():
        import transformers      # on the GPU image; lazily, so the rest runs without it
        config = transformers.AutoConfig.for_model("llama", **fields)
        return transformers.AutoModelForCausalLM.from_config(config)
    return build


def model_specs(tiny: bool = False) -> list[ModelSpec]:
    """The five models, most important first (the bar's LLaMA 4 x 1024 and GQA model)."""
    config = "tiny" if tiny else None
    return [
        ModelSpec("llama 4x1024", 2 * 16 if tiny else 4 * 1024, _our_model("llama.py", config)),
        ModelSpec("hf llama GQA 4x1024", 2 * 16 if tiny else 4 * 1024, _hf_llama(HF_GQA_TINY if tiny else HF_GQA)),
        ModelSpec("llama 1x512", 16 if tiny else 512, _our_model("llama.py", config)),
        ModelSpec("gpt2 1x512", 16 if tiny else 512, _our_model("gpt2.py", config)),
        ModelSpec("bert 1x512", 16 if tiny else 512, _our_model("bert.py", config)),
    ]


def gemms_of(model: nn.Module, tokens: int, name: str) -> list[Gemm]:
    found: list[Gemm] = []
    for path, module in model.named_modules():
        if type(module) is nn.Linear:
            found.append(Gemm(tokens, module.out_features, module.in_features, "plain", [f"{name}: {path}"]))
        linears = mlp_linears(module)
        if linears is not None:
            gate = linears[0]
            found.append(Gemm(tokens, gate.out_features, gate.in_features, "dual", [f"{name}: {path} (gate+up)"]))
    return found


def model_gemms(tiny: bool = False, only: list[str] | None = None) -> list[Gemm]:
    """The distinct GEMMs of the models, in the models' order (a shape two models share is listed once, with
    both uses). A model that cannot be built here (no transformers) is skipped with a note on stderr."""
    distinct: dict[tuple, Gemm] = {}
    for spec in model_specs(tiny):
        if only and spec.name not in only:
            continue
        try:
            with torch.device("meta"):
                model = spec.build()
        except ImportError as exc:
            print(f"skipping {spec.name}: {exc}", file=sys.stderr)
            continue
        for gemm in gemms_of(model, spec.tokens, spec.name):
            known = distinct.setdefault(gemm.key, Gemm(gemm.M, gemm.N, gemm.K, gemm.kind))
            known.uses += [use for use in gemm.uses if use not in known.uses]
    return list(distinct.values())


def _short_uses(gemm: Gemm) -> str:
    models = {}
    for use in gemm.uses:
        model, path = use.split(": ", 1)
        models.setdefault(model, set()).add(path.split(".")[-1])
    return "; ".join(f"{model}: {', '.join(sorted(paths))}" for model, paths in models.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tiny", action="store_true", help="the models at their CPU test sizes")


def main(args: argparse.Namespace) -> None:
    print("| M x N x K | kind | used by |\n|---|---|---|")
    for gemm in model_gemms(args.tiny):
        print(f"| {gemm.M} x {gemm.N} x {gemm.K} | {gemm.kind} | {_short_uses(gemm)} |")

