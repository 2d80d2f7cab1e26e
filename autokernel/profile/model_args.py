"""The command-line flags that name a model, shared by profile.py, verify.py and `autokernel optimize`.

Kept free of torch so that `--help` answers at once; the flags are turned into load_model's
keywords only when a command runs.
"""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser, *, with_device: bool = True) -> None:
    parser.add_argument("model", nargs="?",
                        help="model file: get_model()/get_inputs(), a KernelBench Model, or with --class-name")
    parser.add_argument("--hf", metavar="ARCH",
                        help="a Hugging Face architecture with random weights instead of a file, like llama")
    parser.add_argument("--class-name", help="the nn.Module class in the model file to build")
    parser.add_argument("--input-shape",
                        help="input shape like 1,512 (token ids when the model starts with an embedding, else floats)")
    parser.add_argument("--dtype", help="float16, bfloat16 or float32 (default: as the model file builds it)")
    parser.add_argument("--model-arg", action="append", default=[], metavar="NAME=VALUE",
                        help="keyword argument for the model file's get_model or class, like config=tiny or "
                             "batch=4 and seq=1024 for the shipped models; with --hf, a field of the architecture's "
                             "config, like num_key_value_heads=4 (repeatable)")
    if with_device:
        parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")


def load_model_keywords(args: argparse.Namespace) -> dict:
    """load_model's keywords from the parsed flags; a bad --input-shape or --model-arg raises ModelLoadError."""
    from autokernel.profile import models

    keywords = {"path": args.model, "hf": args.hf, "class_name": args.class_name, "dtype": args.dtype,
                "input_shape": models.parse_input_shape(args.input_shape) if args.input_shape else None,
                "model_kwargs": dict(models.parse_model_arg(arg) for arg in args.model_arg) or None}
    if getattr(args, "device", None) is not None:
        keywords["device"] = args.device
    return keywords


def model_flags(args: argparse.Namespace) -> list[str]:
    """The flags that name the model in args, as verify.py and profile.py take them: what a run records, so that
    `autokernel verify` with no model checks exactly the model the run optimized (its file's path made absolute)."""
    from pathlib import Path

    flags = [str(Path(args.model).resolve())] if args.model is not None else []
    for name in ("hf", "class_name", "input_shape", "dtype"):
        if getattr(args, name, None) is not None:
            flags += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    for value in args.model_arg:
        flags += ["--model-arg", value]
    return flags


def names_a_model(args: argparse.Namespace) -> bool:
    """Whether any model flag was given (the model itself, or how to build it)."""
    return any(getattr(args, name, None) is not None for name in ("model", "hf", "class_name", "input_shape",
                                                                  "dtype")) or bool(args.model_arg)


def shown_flags(flags: list[str]) -> str:
    """Recorded model flags as a user would type them: the model file relative to this folder when inside it."""
    import shlex
    from pathlib import Path

    words = list(flags)
    if words and not words[0].startswith("--"):
        try:
            words[0] = str(Path(words[0]).relative_to(Path.cwd().resolve()))
        except ValueError:
            pass
    return shlex.join(words)
