"""Keyword terms and RAGFlow's hybrid score, shared by every backend so they rank alike.

RAGFlow (`rag/nlp/search.py` Dealer.rerank) collects candidates with full-text and vector search, then
scores each one as

    similarity = keywords_similarity_weight * term_similarity + (1 - weight) * vector_similarity

where term_similarity is the share of the query's term weight found in the chunk (terms weighted by
rarity) and vector_similarity is the cosine of query and chunk embeddings. We do the same: backends only
collect candidates (BM25 through SQLite FTS5, or Weaviate's hybrid search) and report cosines. As in
RAGFlow, a chunk's important keywords and questions are searched with its content and their terms count
as found; among equal scores, the chunk whose keywords match more query terms ranks first (RAGFlow's
full-text query boosts `important_kwd`).

Tokens follow SQLite FTS5's `unicode61 remove_diacritics 2` tokenizer (runs of letters and digits, case
and accents folded), so a term the index matched is a term found here.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from typing import Any, Iterable, Mapping, Sequence

_TOKEN = re.compile(r"[^\W_]+")
MAX_TERMS = 32

# Words that match nearly every chunk: they add cost to BM25 and noise to term similarity.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)


def fold(text: str) -> str:
    """Lower case without accents (unicode61's remove_diacritics 2); ASCII text takes the fast path."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(fold(text))


# ASCII punctuation -> space: `text.lower().translate(_ASCII_SEP).split()` tokenizes ASCII text exactly as
# _TOKEN does, for less (hundreds of candidates are scored per query; docs/speed-policies.md).
_ASCII_SEP = str.maketrans({c: " " for c in string.punctuation})


def term_matcher(query_terms: Sequence[str]) -> frozenset[str]:
    return frozenset(query_terms)


def found_terms(matcher: frozenset[str], text: str) -> frozenset[str]:
    """The query terms that occur in `text` as whole tokens."""
    if not matcher:
        return frozenset()
    words = text.lower().translate(_ASCII_SEP).split() if text.isascii() else _TOKEN.findall(fold(text))
    return matcher.intersection(words)


def terms(query: str) -> tuple[str, ...]:
    """The query's keyword terms: folded tokens without stopwords, deduplicated, in order, at most 32."""
    seen: dict[str, None] = {}
    for tok in tokens(query):
        if tok in STOPWORDS or (len(tok) == 1 and tok.isascii() and not tok.isdigit()):
            continue
        seen.setdefault(tok, None)
        if len(seen) >= MAX_TERMS:
            break
    if not seen:  # a query made only of stopwords still deserves a keyword search
        for tok in tokens(query)[:MAX_TERMS]:
            seen.setdefault(tok, None)
    return tuple(seen)


def idf(doc_freq: int, total: int) -> float:
    """BM25's idf, floored so a term found everywhere still counts a little."""
    return max(math.log(1.0 + (total - doc_freq + 0.5) / (doc_freq + 0.5)), 0.05)


def term_similarity(chunk_tokens: frozenset[str], query_terms: Sequence[str], weights: Mapping[str, float]) -> float:
    """Share of the query's term weight present in the chunk, in [0, 1]."""
    total = 0.0
    found = 0.0
    for t in query_terms:
        w = weights.get(t, 1.0)
        total += w
        if t in chunk_tokens:
            found += w
    return found / total if total else 0.0


def keyword_text(extra: Mapping[str, Any]) -> str:
    """A chunk's important keywords and questions as one text (RAGFlow's important_kwd and question_tks):
    the keyword index matches it beside the content, and its terms count towards term similarity."""
    words = [w for key in ("important_keywords", "questions") for w in (extra.get(key) or []) if isinstance(w, str)]
    return "\n".join(words)


def available(extra: Mapping[str, Any]) -> bool:
    """False for a chunk a client switched off (RAGFlow's available_int 0): search never returns it."""
    return extra.get("available", True) is not False


def hybrid(term_sim: float, vector_sim: float, keywords_weight: float) -> float:
    return keywords_weight * term_sim + (1.0 - keywords_weight) * vector_sim


def fts_match(query_terms: Iterable[str]) -> str:
    """An FTS5 MATCH expression: any of the terms, each quoted so no term is read as an operator."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in query_terms)
