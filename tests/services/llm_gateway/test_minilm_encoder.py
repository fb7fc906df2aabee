"""The numpy all-MiniLM-L6-v2 encoder's fast paths give the vectors of the plain computation.

The encoder packs texts without padding, folds the attention scale into the weights, runs GELU in place
with clamped exponents and splits big calls over two threads. None of that may change a vector: a text
encoded alone, in a batch, or on either thread count comes out the same, and the GELU matches math.erf.
(The match with sentence-transformers itself is test_llm_local.py's.)
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from services.llm_gateway.providers._minilm import MiniLMEncoder, gelu_
from services.llm_gateway.providers.local import embedding_model_dir

TEXTS = [
    "Hello world",
    "",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "Ports: the gateway listens on 8080 and the orchestrator on 50051. " * 3,
    # more than the model's 256 tokens
    " ".join(f"word{i} and some ordinary prose about retrieval, chunks and citations" for i in range(40)),
    "Same length one.",
    "Same length two.",
]


@pytest.fixture(scope="module")
def encoders():
    one, two = MiniLMEncoder(embedding_model_dir(), threads=1), MiniLMEncoder(embedding_model_dir(), threads=2)
    yield one, two
    one.close()
    two.close()


def test_gelu_matches_the_exact_erf_formula():
    x = np.linspace(-12, 12, 20001, dtype=np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    got = gelu_(x.copy(), np.empty_like(x))
    assert np.max(np.abs(got - exact)) < 2e-6
    assert got[0] == 0.0 and got[-1] == pytest.approx(12.0)  # far tails: 0 and x, no subnormal left behind
    tiny = np.finfo(np.float32).tiny
    assert not np.any((got != 0) & (np.abs(got) < tiny))


def test_a_text_gets_the_same_vector_alone_or_in_any_batch(encoders):
    one, _ = encoders
    batch, tokens = one.encode(TEXTS)
    alone = np.stack([one.encode([t])[0][0] for t in TEXTS])
    assert np.array_equal(batch, alone)  # no padding, so no batch-dependent rounding either
    reordered, _ = one.encode(TEXTS[::-1])
    assert np.array_equal(reordered[::-1], batch)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert tokens == sum(len(e.ids) for e in one.tokenizer.encode_batch(TEXTS))
    assert tokens > 256 + 40  # the long text was cut to the model's 256 tokens, not dropped


def test_two_threads_give_the_vectors_of_one(encoders):
    one, two = encoders
    texts = TEXTS * 6  # > _MIN_SPLIT_TOKENS: the call is split over the two threads
    a, ta = one.encode(texts)
    b, tb = two.encode(texts)
    assert ta == tb and np.array_equal(a, b)


def test_similar_texts_are_closer_than_unrelated_ones(encoders):
    one, _ = encoders
    v, _ = one.encode(["The gateway listens on port 8080.", "Port 8080 is where the gateway listens.",
                       "Bananas are rich in potassium."])
    assert v[0] @ v[1] > 0.8 > v[0] @ v[2] + 0.5
