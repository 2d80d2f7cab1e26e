"""Tests for autokernel/profile/models.py's Hugging Face loader (`--hf NAME`): architectures built from a config."""

import sys
import types

import pytest
import torch

from autokernel.profile.models import load_model
from tests.test_models import TINY_SHAPE, load_error


def test_hf_without_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)   # makes `import transformers` fail
    message = load_error(hf="llama")
    assert "transformers" in message and "pip install transformers" in message and "pip install -e .[hf]" in message


def fake_transformers(monkeypatch, built: dict) -> None:
    """A stand-in for the few transformers names the loader uses, recording what it was asked."""
    class Config:
        def __init__(self, model_type, **fields):
            self.model_type, self.vocab_size = model_type, fields.get("vocab_size", 50)
            built["fields"] = fields

    class Auto:
        def __init__(self, kind):
            self.kind = kind

        def from_config(self, config):
            built["auto_class"] = self.kind
            return torch.nn.Sequential(torch.nn.Embedding(config.vocab_size, 4), torch.nn.Linear(4, 4))

    def for_model(model_type, **fields):
        if model_type not in ("llama", "bert"):
            raise ValueError(f"Unrecognized model identifier: {model_type}.")
        return Config(model_type, **fields)

    package = types.ModuleType("transformers")
    package.AutoConfig = types.SimpleNamespace(for_model=for_model)
    package.AutoModelForCausalLM, package.AutoModel = Auto("causal"), Auto("base")
    modeling_auto = types.ModuleType("transformers.models.auto.modeling_auto")
    modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = {"llama": "LlamaForCausalLM", "bert": "BertLMHeadModel"}
    modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES = {"bert": "BertForMaskedLM"}
    for name, module in [("transformers", package), ("transformers.models", types.ModuleType("m")),
                         ("transformers.models.auto", types.ModuleType("a")),
                         ("transformers.models.auto.modeling_auto", modeling_auto)]:
        monkeypatch.setitem(sys.modules, name, module)


def test_hf_builds_decoders_as_causal_lms_and_encoders_bare(monkeypatch):
    built = {}
    fake_transformers(monkeypatch, built)
    loaded = load_model(hf="llama", hf_overrides={"vocab_size": 20, "num_hidden_layers": 2}, input_shape=(2, 9),
                        device="cpu")
    assert built["auto_class"] == "causal"
    assert built["fields"] == {"use_cache": False, "vocab_size": 20, "num_hidden_layers": 2}
    assert loaded.name == "hf:llama" and loaded.inputs[0].shape == (2, 9) and int(loaded.inputs[0].max()) < 20
    load_model(hf="bert", device="cpu")
    assert built["auto_class"] == "base"
    assert "no architecture called 'nonsense'" in load_error(hf="nonsense")


def test_hf_with_real_transformers_builds_a_tiny_llama():
    pytest.importorskip("transformers", reason="transformers is the optional [hf] extra")
    loaded = load_model(hf="llama", device="cpu", input_shape=TINY_SHAPE, hf_overrides=dict(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4))
    assert loaded.model(*loaded.inputs).logits.shape == (*TINY_SHAPE, 100)


def test_hf_encoder_decoders_get_decoder_tokens_and_whisper_its_audio_encoder():
    # T5 and Whisper refused to run with the encoder's input alone ("You must specify exactly one of input_ids or
    # inputs_embeds"), and Whisper was built as its causal LM: the decoder alone, fed the spectrogram's shape as
    # token ids.
    pytest.importorskip("transformers", reason="transformers is the optional [hf] extra")
    t5 = load_model(hf="t5", device="cpu", input_shape=TINY_SHAPE, hf_overrides=dict(
        vocab_size=100, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2))
    assert t5.inputs[1] is None and t5.inputs[2].shape == TINY_SHAPE and int(t5.inputs[2].max()) < 100
    whisper = load_model(hf="whisper", device="cpu", input_shape=(1, 16, 32), hf_overrides=dict(
        vocab_size=100, num_mel_bins=16, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
        max_target_positions=8, pad_token_id=0, decoder_start_token_id=1))
    audio, _, tokens = whisper.inputs
    assert type(whisper.model).__name__ == "WhisperModel" and audio.is_floating_point()
    # The decoder reads at most its positions when the encoder reads no tokens.
    assert tokens.shape == (1, 8) and tokens.dtype == torch.int64
    assert whisper.model(*whisper.inputs).last_hidden_state.shape == (1, 8, 32)
