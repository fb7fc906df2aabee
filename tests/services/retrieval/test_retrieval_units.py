"""Parsing, chunking, scoring, metadata filters and the in-memory vector index, without gRPC."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.retrieval import scoring
from services.retrieval.backends import _vector_index as vindex
from services.retrieval.chunking import chunk_blocks, count_tokens, split_sentences
from services.retrieval.metadata_filter import filter_documents
from services.retrieval.models import Document, MetadataCondition
from services.retrieval.parsing import HTML, MARKDOWN, PDF, TEXT, Block, ParseError, detect_type, parse
from tests.support.pdf import make_pdf


def test_detect_type_uses_mime_then_extension_then_bytes():
    assert detect_type("a.bin", "text/markdown; charset=utf-8", b"") == MARKDOWN
    assert detect_type("README.MD", "", b"") == MARKDOWN
    assert detect_type("page.htm", "", b"") == HTML
    assert detect_type("noext", "", b"%PDF-1.7 ...") == PDF
    assert detect_type("noext", "", b"  <!DOCTYPE html><html>") == HTML
    assert detect_type("notes", "", b"hello") == TEXT
    with pytest.raises(ParseError, match="unsupported document type"):
        detect_type("x.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", b"PK")


def test_markdown_headings_setext_and_code_fences():
    blocks = parse("a.md", "", b"Title\n=====\n\nIntro text.\n\n## Part ##\n\n```\n# not a heading\n```\n\nSub\n---\nEnd.")
    assert [(b.heading_level, b.text) for b in blocks] == [
        (1, "Title"), (0, "Intro text."), (2, "Part"), (0, "```\n# not a heading\n```"), (2, "Sub"), (0, "End.")]


def test_html_keeps_structure_and_drops_scripts():
    html = (b"<html><head><title>T</title><style>p{}</style></head><body><nav>Menu</nav><h2>Sec</h2>"
            b"<p>One <b>bold</b> word.<br>Next line.</p><ul><li>a</li><li>b</li></ul><script>evil()</script></body></html>")
    blocks = parse("p.html", "", html)
    assert [(b.heading_level, b.text) for b in blocks] == [
        (1, "T"), (0, "Menu"), (3, "Sec"), (0, "One bold word.\nNext line."), (0, "a"), (0, "b")]


def test_pdf_pages_and_errors():
    blocks = parse("r.pdf", "", make_pdf(["first page", "second page\nmore"]))
    assert [(b.page, b.text.split()) for b in blocks] == [(1, ["first", "page"]), (2, ["second", "page", "more"])]
    with pytest.raises(ParseError, match="not a readable PDF"):
        parse("r.pdf", "", b"%PDF-1.4 nonsense")
    with pytest.raises(ParseError, match="binary"):
        parse("r.txt", "", b"\x00\x01\x02binary")
    assert parse("latin.txt", "", "café crème".encode("cp1252"))[0].text == "café crème"


def test_chunks_respect_size_overlap_and_headings():
    sentences = " ".join(f"Sentence number {i} is here." for i in range(40))
    blocks = [Block("Guide", 1), Block("Intro", 2), Block(sentences), Block("Other", 2), Block("Short tail section.")]
    pieces = chunk_blocks(blocks, size=30, overlap=8)
    assert all(count_tokens(p.text) <= 30 for p in pieces)
    assert all(p.text.startswith("Guide > Intro\n") for p in pieces[:-1])
    assert pieces[-1].text == "Guide > Other\nShort tail section."
    # Neighbours within a section share their boundary sentence (overlap), cut on sentence ends.
    first_body, second_body = pieces[0].text.split("\n", 1)[1], pieces[1].text.split("\n", 1)[1]
    last_sentence = split_sentences(first_body)[-1]
    assert second_body.startswith(last_sentence) and last_sentence.endswith(".")


def test_small_sections_share_a_chunk_and_long_sentences_are_cut():
    pieces = chunk_blocks([Block("A", 1), Block("tiny."), Block("B", 1), Block("also tiny.")], size=64, overlap=8)
    assert [p.text for p in pieces] == ["A\ntiny.\nB\nalso tiny."]
    long = " ".join(f"w{i}" for i in range(100))
    pieces = chunk_blocks([Block(long)], size=32, overlap=0)
    assert len(pieces) == 4 and all(count_tokens(p.text) <= 32 for p in pieces)
    assert " ".join(p.text for p in pieces) == long


def test_terms_and_term_similarity():
    assert scoring.terms("What is the Café's opening-time?") == ("cafe", "opening", "time")
    assert scoring.terms("the of and") == ("the", "of", "and")  # only stopwords: keep them
    weights = {"rare": 3.0, "common": 1.0}
    assert scoring.term_similarity(frozenset({"rare"}), ("rare", "common"), weights) == pytest.approx(0.75)
    assert scoring.idf(1, 1000) > scoring.idf(900, 1000) > 0
    assert scoring.fts_match(['a"b', "c"]) == '"a""b" OR "c"'


def _doc(i: str, **meta) -> Document:
    return Document(i, "ds", i, metadata=meta)


def test_metadata_filter_operators():
    docs = [_doc("a", year=2020, tag=["x", "y"], title="Alpha Report"), _doc("b", year="2024", title="beta"), _doc("c")]
    f = lambda *conds, logic="and": filter_documents(docs, [MetadataCondition(*c) for c in conds], logic)  # noqa: E731
    assert f(("year", "≥", "2021")) == {"b"}
    assert f(("year", ">=", "2020"), ("title", "start with", "alpha")) == {"a"}
    assert f(("tag", "=", "y")) == {"a"}
    assert f(("tag", "≠", "y")) == {"b", "c"}
    assert f(("title", "not contains", "report")) == {"b", "c"}
    assert f(("title", "empty", "")) == {"c"}
    assert f(("title", "end with", "beta"), ("year", "<", "2021"), logic="or") == {"a", "b"}
    with pytest.raises(InvalidArgument, match="unknown operator"):
        f(("year", "between", "1"))
    with pytest.raises(InvalidArgument, match="metadata_logic"):
        f(("year", "=", "1"), logic="xor")


def test_vector_index_search_filter_remove_and_grow():
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((200, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = vindex.VectorIndex(16, capacity=16)  # grows several times
    index.add(list(range(1000, 1200)), [f"d{i % 4}" for i in range(200)], vecs)
    assert index.nbytes > 0 and len(index) == 200
    q = vecs[7]
    assert vindex.search(index.snapshot(), q, 3, None)[0] == 1007
    exact = [1000 + i for i in np.argsort(-(vecs @ q))[:10]]
    assert vindex.search(index.snapshot(), q, 10, None) == exact
    only_d1 = vindex.search(index.snapshot(), q, 5, frozenset({"d1"}))
    assert len(only_d1) == 5 and all((r - 1000) % 4 == 1 for r in only_d1)
    assert vindex.search(index.snapshot(), q, 5, frozenset({"missing"})) == []
    index.remove([1007])
    assert 1007 not in vindex.search(index.snapshot(), q, 200, None) and len(index) == 199
    index.remove(range(1000, 1150))  # enough dead rows to compact
    left = vindex.search(index.snapshot(), q, 500, None)
    assert sorted(left) == list(range(1150, 1200))


def test_index_cache_budget_and_eviction():
    cache = vindex.IndexCache(budget_bytes=64 * 1024)
    assert cache.fits(100, 16) and not cache.fits(10_000, 16)
    assert not vindex.IndexCache(0).fits(1, 1)
    a, b = vindex.VectorIndex(16, capacity=600), vindex.VectorIndex(16, capacity=600)  # ~46 KB each
    cache.put("a", a)
    cache.put("b", b)  # together over budget: the least recently used goes
    assert cache.get("a") is None and cache.get("b") is b


def test_common_terms_are_left_out_of_the_bm25_pass_in_large_corpora():
    from services.retrieval.backends.sqlite import _match_terms

    freq = {"the": 90_000, "rare": 12, "mid": 15_000}
    assert _match_terms(("the", "rare", "mid", "absent"), freq, 100_000) == ("rare", "mid")
    assert _match_terms(("the", "mid"), {"the": 90_000, "mid": 60_000}, 100_000) == ("mid",)  # rarest stays
    assert _match_terms(("a", "b"), {"a": 2, "b": 1}, 2) == ("a", "b")  # small corpus: nothing dropped

