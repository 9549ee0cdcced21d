"""A zoo of models for the ``torch.compile`` backend: one builder per model.

Each builder takes the model's size parameters (tiny defaults, for the CPU tests
under Triton's interpreter; full sizes for a GPU benchmark or a DDP/FSDP run), and
the transformer builders any other field of their config class as a keyword, and
returns a ``ZooModel``: the module, with random weights and dropout off, and a
``batch(n, generator)`` that draws one batch of inputs and labels as keyword
arguments.  ``loss(model(**batch))`` is the scalar to differentiate.

The transformer models come from ``transformers``' config classes (nothing is
downloaded), built with eager attention so the backend sees the attention's
softmax rather than an SDPA kernel.  ``transformers`` is imported lazily: it is a
test and benchmark dependency, not one of the package.

* ``bert``: ``BertForMaskedLM`` (post-LayerNorm, GELU, masked-LM loss).
* ``gpt2``: ``GPT2LMHeadModel`` (fused QKV projection split in three, tanh GELU,
  causal mask, tied embeddings).
* ``llama``: ``LlamaForCausalLM`` (RMSNorm, rotary embeddings, SiLU-gated MLP,
  grouped-query attention: fewer key/value heads than query heads).
* ``t5``: ``T5ForConditionalGeneration`` (encoder-decoder, relative position bias,
  RMS-style layer norm without mean, cross attention; ``feed_forward_proj="gated-gelu"``
  for T5 v1.1's gated feed-forward).
* ``vit``: ``ViTForImageClassification`` (a patch-embedding convolution, [CLS]).
* ``mlp``: LayerNorm -> Linear -> GELU -> Linear with a cross-entropy loss, the
  model the zoo trains for several AdamW steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

MODELS = ("bert", "gpt2", "llama", "t5", "vit", "mlp")


@dataclass
class ZooModel:
    """A built model and its batches.  Both are on the CPU: move the model with
    ``.to(device)`` and each batch's tensors alike (``{k: v.to(device) ...}``)."""

    name: str
    model: nn.Module  # in training mode, every dropout probability 0
    batch: Callable[[int, torch.Generator], dict]  # (batch size, generator) -> keyword arguments


def loss(out) -> torch.Tensor:
    """The scalar loss of a zoo model's output (a ``transformers`` output or a tensor)."""
    return out if isinstance(out, torch.Tensor) else out.loss


def _from_config(cls, config) -> nn.Module:
    return cls._from_config(config, attn_implementation="eager").train()


def _padding(n, seq, g):
    """An attention mask whose odd rows end in 1 .. seq // 2 padding positions."""
    lengths = torch.full((n,), seq)
    lengths[1::2] -= torch.randint(1, seq // 2 + 1, (n // 2,), generator=g)
    return (torch.arange(seq) < lengths[:, None]).long()


def _labels(ids, mask, vocab, g):
    """Random labels, ignored (-100) at padding and at about a quarter of the rest."""
    labels = torch.randint(0, vocab, ids.shape, generator=g)
    ignored = (mask == 0) | (torch.rand(ids.shape, generator=g) < 0.25)
    ignored[:, 1] = False  # never an all-ignored batch
    return labels.masked_fill(ignored, -100)


def _tokens(vocab, seq):
    def batch(n, g):
        ids = torch.randint(0, vocab, (n, seq), generator=g)
        mask = _padding(n, seq, g)
        return dict(input_ids=ids, attention_mask=mask, labels=_labels(ids, mask, vocab, g))
    return batch


def bert(hidden=32, layers=1, heads=2, intermediate=64, vocab=128, seq=8, **config) -> ZooModel:
    from transformers import BertConfig, BertForMaskedLM

    fields = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max(seq, 16),
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = _from_config(BertForMaskedLM, BertConfig(**(fields | config)))
    return ZooModel("bert", model, _tokens(vocab, seq))


def gpt2(hidden=32, layers=1, heads=2, vocab=128, seq=8, **config) -> ZooModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    fields = dict(n_embd=hidden, n_layer=layers, n_head=heads, vocab_size=vocab, n_positions=max(seq, 16),
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = _from_config(GPT2LMHeadModel, GPT2Config(**(fields | config)))
    return ZooModel("gpt2", model, _tokens(vocab, seq))


def llama(hidden=32, layers=1, heads=4, kv_heads=2, intermediate=64, vocab=128, seq=8, **config) -> ZooModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, intermediate_size=intermediate, vocab_size=vocab,
                  max_position_embeddings=max(seq, 16), attention_dropout=0.0, hidden_act="silu")
    model = _from_config(LlamaForCausalLM, LlamaConfig(**(fields | config)))
    return ZooModel("llama", model, _tokens(vocab, seq))


def t5(hidden=32, layers=1, heads=2, ff=64, vocab=128, seq=8, target_seq=6, **config) -> ZooModel:
    from transformers import T5Config, T5ForConditionalGeneration

    fields = dict(d_model=hidden, d_kv=hidden // heads, d_ff=ff, num_layers=layers, num_decoder_layers=layers,
                  num_heads=heads, vocab_size=vocab, dropout_rate=0.0, relative_attention_num_buckets=8,
                  relative_attention_max_distance=16, decoder_start_token_id=0, pad_token_id=0)
    model = _from_config(T5ForConditionalGeneration, T5Config(**(fields | config)))

    def batch(n, g):
        ids, mask = torch.randint(1, vocab, (n, seq), generator=g), _padding(n, seq, g)
        target = torch.randint(1, vocab, (n, target_seq), generator=g)
        return dict(input_ids=ids, attention_mask=mask, labels=_labels(target, _padding(n, target_seq, g), vocab, g))
    return ZooModel("t5", model, batch)


def vit(hidden=32, layers=1, heads=2, intermediate=64, image=8, patch=4, channels=3, labels=10, **config) -> ZooModel:
    from transformers import ViTConfig, ViTForImageClassification

    # problem_type given: transformers sets it at the first call otherwise, a recompile.
    fields = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate, image_size=image, patch_size=patch, num_channels=channels,
                  num_labels=labels, problem_type="single_label_classification",
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = _from_config(ViTForImageClassification, ViTConfig(**(fields | config)))

    def batch(n, g):
        return dict(pixel_values=torch.randn(n, channels, image, image, generator=g),
                    labels=torch.randint(0, labels, (n,), generator=g))
    return ZooModel("vit", model, batch)


class MLP(nn.Module):
    """LayerNorm -> Linear -> GELU -> Linear, and the cross-entropy of its logits."""

    def __init__(self, features, hidden, classes):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        self.fc1, self.fc2 = nn.Linear(features, hidden), nn.Linear(hidden, classes)

    def forward(self, x, labels):
        logits = self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))
        return nn.functional.cross_entropy(logits, labels)


def mlp(features=32, hidden=64, classes=10) -> ZooModel:
    def batch(n, g):
        return dict(x=torch.randn(n, features, generator=g), labels=torch.randint(0, classes, (n,), generator=g))
    return ZooModel("mlp", MLP(features, hidden, classes).train(), batch)


BUILDERS = dict(bert=bert, gpt2=gpt2, llama=llama, t5=t5, vit=vit, mlp=mlp)


def build(name: str, seed: int = 0, **sizes) -> ZooModel:
    """The zoo's model ``name`` with its weights drawn from ``torch.manual_seed(seed)``."""
    if name not in BUILDERS:
        raise KeyError(f"zoo: no model {name!r}; the zoo has {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return BUILDERS[name](**sizes)
