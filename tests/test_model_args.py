"""The shared model flags turn into load_model's keywords, with clear errors for bad values."""

import argparse

import pytest

from autokernel.profile.model_args import add_model_arguments, load_model_keywords
from autokernel.profile.models import ModelLoadError


def parse(argv, **options):
    parser = argparse.ArgumentParser()
    add_model_arguments(parser, **options)
    return parser.parse_args(argv)


def test_flags_become_load_model_keywords():
    args = parse(["models/llama.py", "--input-shape", "2,64", "--dtype", "float16", "--model-arg", "config=tiny",
                  "--model-arg", "n_layers=2", "--device", "cpu"])
    assert load_model_keywords(args) == {
        "path": "models/llama.py", "hf": None, "class_name": None, "dtype": "float16", "input_shape": (2, 64),
        "model_kwargs": {"config": "tiny", "n_layers": 2}, "device": "cpu"}


def test_true_and_false_become_booleans():
    # A Hugging Face config's switch (tie_word_embeddings=false) given as the string "false" would be true.
    args = parse(["--hf", "falcon", "--model-arg", "parallel_attn=false", "--model-arg", "bias=True",
                  "--model-arg", "name=falsetto"])
    assert load_model_keywords(args)["model_kwargs"] == {"parallel_attn": False, "bias": True, "name": "falsetto"}


def test_without_the_device_flag_the_loader_chooses():
    args = parse(["--hf", "llama"], with_device=False)
    assert not hasattr(args, "device")
    assert load_model_keywords(args) == {"path": None, "hf": "llama", "class_name": None, "dtype": None,
                                         "input_shape": None, "model_kwargs": None}


def test_bad_values_are_clear_errors():
    with pytest.raises(ModelLoadError, match="--input-shape"):
        load_model_keywords(parse(["m.py", "--input-shape", "1x512"]))
    with pytest.raises(ModelLoadError, match="--model-arg"):
        load_model_keywords(parse(["m.py", "--model-arg", "tiny"]))


def test_the_flags_a_run_records_name_the_same_model_again(tmp_path, monkeypatch):
    from autokernel.profile.model_args import model_flags, names_a_model

    monkeypatch.chdir(tmp_path)
    args = parse(["m.py", "--input-shape", "2,64", "--model-arg", "config=tiny", "--model-arg", "n_layers=2"],
                 with_device=False)
    flags = model_flags(args)
    assert flags == [str(tmp_path / "m.py"), "--input-shape", "2,64", "--model-arg", "config=tiny",
                     "--model-arg", "n_layers=2"]
    again = parse(flags)
    assert load_model_keywords(again) == {**load_model_keywords(args), "path": str(tmp_path / "m.py")}
    assert model_flags(parse(["--hf", "llama", "--dtype", "float16"])) == ["--hf", "llama", "--dtype", "float16"]
    assert names_a_model(args) and names_a_model(parse(["--model-arg", "a=1"])) and not names_a_model(parse([]))
