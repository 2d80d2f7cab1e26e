"""Hugging Face models that --hf cannot build alone (encoder-decoder, audio), tiny, random weights."""
import torch
import transformers as t


def get_model(arch="t5enc"):
    torch.manual_seed(0)
    if arch in ("t5enc", "t5"):
        cfg = t.T5Config(vocab_size=128, d_model=32, d_ff=64, d_kv=16, num_layers=2, num_decoder_layers=2, num_heads=2,
                         use_cache=False)
        return (t.T5EncoderModel(cfg) if arch == "t5enc" else t.T5ForConditionalGeneration(cfg)).eval()
    if arch == "whisper":
        cfg = t.WhisperConfig(vocab_size=128, num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=2,
                              decoder_layers=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                              max_source_positions=16, max_target_positions=16, use_cache=False, pad_token_id=0,
                              bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
        return t.WhisperModel(cfg).eval()
    if arch == "wav2vec2":
        cfg = t.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                               conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                               num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, feat_extract_norm="group")
        return t.Wav2Vec2Model(cfg).eval()
    if arch == "hfconvnext":
        cfg = t.ConvNextConfig(num_channels=3, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10, image_size=32,
                               num_stages=2)
        return t.ConvNextForImageClassification(cfg).eval()
    if arch == "hfswin":
        cfg = t.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                           num_labels=10)
        return t.SwinForImageClassification(cfg).eval()
    if arch == "bart":
        cfg = t.BartConfig(vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, use_cache=False)
        return t.BartForConditionalGeneration(cfg).eval()
    raise ValueError(arch)


def get_inputs(arch="t5enc"):
    torch.manual_seed(0)
    if arch == "t5enc":
        return [torch.randint(0, 128, (1, 16))]
    if arch in ("t5", "bart"):
        return [torch.randint(0, 128, (1, 16)), None, torch.randint(0, 128, (1, 8))]
    if arch == "whisper":
        return [torch.randn(1, 16, 32), None, torch.randint(0, 128, (1, 8))]
    if arch == "wav2vec2":
        return [torch.randn(1, 800)]
    return [torch.randn(1, 3, 32, 32)]
