"""Linears that read one input run as one GEMM (autokernel.concat_linears): each model with and without it, paired.

    python benchmarks/end_to_end.py linear-concat [--only NAME ...] [--modes eager compile cudagraphs] [--out DIR]
                                                  [--tiny --backend aot_eager]

For each model (fp16, eval, no gradients) the same model object is timed with the rewrite off and on, repeat by
repeat in turn (autokernel/verify/latency.py paired: a drifting machine moves both alike), eagerly, under
torch.compile and under torch.compile(mode="reduce-overhead"); the speedup is the median of the pairs' ratios with
their spread, and the fused output's error against the unfused one is checked in each mode. The rewrite's flags
are guarded by Dynamo, so a compiled model keeps one graph per state: both are compiled once before timing. This
is what verify's selection decides on end to end (autokernel/verify/rewrites.py), without the kernels beside it.
torch.compile's default mode does not make this rewrite itself (its concat-linear patterns need `freezing`), so
a compiled gain here is one Inductor does not have. Each model's row is printed and appended to OUT/rows.jsonl as
it ends, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.common import env_out, run_info

# name -> (Hugging Face architecture, its config fields, batch, sequence), as the zoo and model_gemms build them.
MODELS = {
    "hf llama GQA 4x1024": ("llama", dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                                          num_attention_heads=16, num_key_value_heads=4, use_cache=False), 4, 1024),
    "hf llama GQA 1x1024": ("llama", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                                          num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                                          use_cache=False), 1, 1024),
    "hf qwen2 GQA 1x512": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=4,
                                         num_attention_heads=14, num_key_value_heads=2, vocab_size=32000,
                                         use_cache=False), 1, 512),
    "hf bert 1x512": ("bert", dict(num_hidden_layers=6), 1, 512),
}
MODES = {"eager": None, "compile": "default", "cudagraphs": "reduce-overhead"}
# --tiny: the CPU tests' sizes, float32 on the CPU (a smoke run of this script: its timings mean nothing)
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def build(name: str, tiny: bool):
    import transformers

    arch, fields, batch, seq = MODELS[name]
    if tiny:
        fields = {**fields, **TINY, **({"num_key_value_heads": 2} if "num_key_value_heads" in fields else {})}
        batch, seq = 1, 16
    config = transformers.AutoConfig.for_model(arch, **fields)
    auto = transformers.AutoModel if arch == "bert" else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.float16)
    model = auto.from_config(config).to(device, dtype).eval()
    return model, (torch.randint(0, config.vocab_size, (batch, seq), device=device),)


def measure(name: str, modes: list[str], tiny: bool = False, backend: str = "inductor") -> dict:
    from autokernel.routing.linear_concat import concat_linears, unconcat_linears
    from autokernel.routing.outputs import output_error, tolerance
    from autokernel.verify import latency

    model, inputs = build(name, tiny)
    started = time.monotonic()
    with torch.no_grad():
        expected = [t.clone() for t in _tensors(model(*inputs))]
        concat = concat_linears(model, inputs)
        row = {"model": name, "groups": len(concat.groups), "rejected": concat.rejected, "modes": {}}
        for mode in modes:
            run = (model if MODES[mode] is None else torch.compile(model, mode=MODES[mode]) if backend == "inductor"
                   else torch.compile(model, backend=backend))

            def call(on: bool, run=run):
                concat.eager = concat.compiled = on
                return run(*inputs)
            errors = {}
            for on in (False, True):             # compiled once per state, and each state's output checked
                for _ in range(3):
                    output = call(on)
                errors[on] = output_error(expected, [t.clone() for t in _tensors(output)])
            off, on = latency.paired(lambda: call(False), lambda: call(True), on_gpu=not tiny, repeats=7)
            speedup, noise = latency.paired_speedup(on, off)
            row["modes"][mode] = {"off_ms": off.median_ms, "on_ms": on.median_ms, "speedup": speedup,
                                  "noise": noise, "error_off": errors[False], "error_on": errors[True],
                                  "tolerance": tolerance(expected)}
            torch._dynamo.reset()
        unconcat_linears(model)
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def _tensors(output) -> list[torch.Tensor]:
    from autokernel.routing.outputs import tensors_of
    return tensors_of(output)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", nargs="*", choices=list(MODELS), help="these models only (default: all)")
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES))
    parser.add_argument("--out", help="folder for rows.jsonl (default: $OUT/linear_concat)")
    parser.add_argument("--tiny", action="store_true", help="tiny float32 models on the CPU: a smoke run")
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend (aot_eager: a CPU smoke run)")


def main(args: argparse.Namespace) -> int:
    info = run_info()
    out = env_out("linear_concat", args.out)
    print(f"{info.device}, {info.versions()}: speedup = rewrite off / on, median of 7 paired repeats (noise: the "
          "median over its smallest ratio, the 97.5% bound at 7 pairs)")
    for name in args.only or list(MODELS):
        row = measure(name, args.modes, args.tiny, args.backend)
        cells = [f"{mode} {m['off_ms']:.3f} -> {m['on_ms']:.3f} ms = {m['speedup']:.3f}x ({m['noise']:.1%}; "
                 f"error {m['error_on']:.2g} of {m['tolerance']:g})" for mode, m in row["modes"].items()]
        print(f"{name}: {row['groups']} groups, {row['seconds']} s; " + "; ".join(cells), flush=True)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "rows.jsonl", "a") as f:
                f.write(json.dumps({**row, "device": info.device, "versions": info.versions()}) + "\n")
    return 0
