"""The numpy all-MiniLM-L6-v2 encoder's fast paths give the vectors of the plain computation.

The encoder packs texts without padding, folds the attention scale into the weights, runs GELU in place
with clamped exponents and splits big calls over two threads. None of that may change what retrieval sees:
a text encoded alone, in a batch, or on either thread count gets the vector of the textbook computation
(float64, one text at a time, exact erf), and a fixed set of queries ranks a fixed set of documents alike.
(The match with sentence-transformers itself is test_llm_local.py's.)

Tolerances, not bit-equality: the BLAS kernel numpy picks depends on the CPU, and float32 sums taken in
another order differ in the last bits (about 1e-7 here after six layers). A wrong encoder is off by 1e-3
and more, so ATOL and MIN_COSINE still catch it, on any x86-64 CPU.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import load_file
from threadpoolctl import threadpool_limits
from tokenizers import Tokenizer

from services.llm_gateway.providers._minilm import MiniLMEncoder, gelu_
from services.llm_gateway.providers.local import embedding_model_dir

ATOL = 1e-5  # per vector component (unit vectors of 384 components, each about 0.05)
MIN_COSINE = 0.99999

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
DOCUMENTS = [
    "The gateway listens for HTTP requests on port 8080.",
    "Bananas are rich in potassium and easy to digest.",
    "A cat sleeps on the warm sofa all afternoon.",
    "Stock markets fell sharply after the interest rate decision.",
    "The orchestrator runs every branch of the workflow as soon as its inputs are ready.",
    "Heavy rain and snow are expected in the mountains this weekend.",
]
QUERIES = {  # query -> the document it is about
    "which port does the gateway use": 0,
    "healthy fruit to eat": 1,
    "a sleepy kitten": 2,
    "financial news today": 3,
    "how are the steps of a workflow scheduled": 4,
    "weather forecast": 5,
}
TOP_K = 3


def reference_vectors(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 as its model card defines it, in float64 and one text at a time, nothing folded or
    fused: BERT -> mean pooling -> L2 normalisation, with GELU from math.erf."""
    model_dir = embedding_model_dir()
    config = json.loads((model_dir / "config.json").read_text())
    max_len = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    w = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_len)
    tokenizer.no_padding()
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
    erf = np.frompyfunc(math.erf, 1, 1)

    def layer_norm(x: np.ndarray, name: str) -> np.ndarray:
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
        return x * w[name + ".weight"] + w[name + ".bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    vectors = []
    for text in texts:
        ids = tokenizer.encode(text).ids
        n = len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = layer_norm(x, "embeddings.LayerNorm")
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (dense(x, p + "attention.self." + m).reshape(n, heads, -1).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)
            context = (weights @ v).transpose(1, 0, 2).reshape(n, -1)
            x = layer_norm(x + dense(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = dense(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)).astype(np.float64))
            x = layer_norm(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
        pooled = x.mean(0)
        vectors.append(pooled / np.linalg.norm(pooled))
    return np.array(vectors)


@pytest.fixture(scope="module")
def encoders():
    one, two = MiniLMEncoder(embedding_model_dir(), threads=1), MiniLMEncoder(embedding_model_dir(), threads=2)
    yield one, two
    one.close()
    two.close()


@pytest.fixture(scope="module")
def reference():
    """Reference vectors of TEXTS, DOCUMENTS and QUERIES, by text."""
    texts = [*TEXTS, *DOCUMENTS, *QUERIES]
    with threadpool_limits(limits=1, user_api="blas"):  # small float64 products: threads only contend
        return dict(zip(texts, reference_vectors(texts)))


def assert_close_to_reference(got: np.ndarray, texts: list[str], reference: dict[str, np.ndarray]) -> None:
    want = np.stack([reference[t] for t in texts])
    cosines = np.sum(got.astype(np.float64) * want, axis=1) / np.linalg.norm(got, axis=1)
    assert cosines.min() > MIN_COSINE, [t[:30] for t, c in zip(texts, cosines) if c <= MIN_COSINE]
    assert np.allclose(got, want, rtol=0, atol=ATOL)


def ranking(queries: np.ndarray, documents: np.ndarray) -> list[list[int]]:
    """The TOP_K documents of each query by cosine similarity, best first."""
    return [list(np.argsort(-(documents @ q), kind="stable")[:TOP_K]) for q in queries]


def test_gelu_matches_the_exact_erf_formula():
    x = np.linspace(-12, 12, 20001, dtype=np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    got = gelu_(x.copy(), np.empty_like(x))
    assert np.max(np.abs(got - exact)) < 2e-6  # float32 rounding of values up to 12 (its ulp: 1e-6)
    assert got[0] == pytest.approx(0.0, abs=1e-30) and got[-1] == pytest.approx(12.0)  # far tails: 0 and x
    tiny = np.finfo(np.float32).tiny
    assert not np.any((got != 0) & (np.abs(got) < tiny))  # no subnormal left behind


def test_vectors_match_the_plain_float64_computation(encoders, reference):
    one, _ = encoders
    vectors, tokens = one.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert_close_to_reference(vectors, TEXTS, reference)
    assert tokens == sum(len(e.ids) for e in one.tokenizer.encode_batch(TEXTS))
    assert tokens > 256 + 40  # the long text was cut to the model's 256 tokens, not dropped


def test_a_text_gets_the_same_vector_alone_or_in_any_batch(encoders, reference):
    one, _ = encoders
    batch, _ = one.encode(TEXTS)
    alone = np.stack([one.encode([t])[0][0] for t in TEXTS])
    reordered, _ = one.encode(TEXTS[::-1])
    assert np.allclose(batch, alone, rtol=0, atol=ATOL)  # no padding: a neighbour never leaks into a vector
    assert np.allclose(reordered[::-1], batch, rtol=0, atol=ATOL)
    assert_close_to_reference(alone, TEXTS, reference)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_two_threads_give_the_vectors_of_one(encoders, reference):
    one, two = encoders
    texts = TEXTS * 6  # > _MIN_SPLIT_TOKENS: the call is split over the two threads
    a, ta = one.encode(texts)
    b, tb = two.encode(texts)
    assert ta == tb
    assert np.allclose(a, b, rtol=0, atol=ATOL)
    assert_close_to_reference(b, texts, reference)


def test_queries_rank_the_documents_as_the_reference_does(encoders, reference):
    queries = list(QUERIES)
    want = ranking(np.stack([reference[q] for q in queries]), np.stack([reference[d] for d in DOCUMENTS]))
    assert [r[0] for r in want] == list(QUERIES.values())  # the fixed set means what it says
    for query, order in zip(queries, want):  # and its top-k is not a near tie that rounding could flip
        scores = np.stack([reference[d] for d in DOCUMENTS]) @ reference[query]
        assert min(scores[a] - scores[b] for a, b in zip(order, order[1:])) > 1e-3, query
    for encoder in encoders:
        q, _ = encoder.encode(queries)
        docs_alone = np.stack([encoder.encode([d])[0][0] for d in DOCUMENTS])
        docs_batch, _ = encoder.encode(DOCUMENTS * 20)  # big enough for the two-thread split
        assert ranking(q, docs_alone) == want
        assert ranking(q, docs_batch[: len(DOCUMENTS)]) == want


def test_similar_texts_are_closer_than_unrelated_ones(encoders):
    one, _ = encoders
    v, _ = one.encode(["The gateway listens on port 8080.", "Port 8080 is where the gateway listens.",
                       "Bananas are rich in potassium."])
    assert v[0] @ v[1] > 0.8 > v[0] @ v[2] + 0.5
