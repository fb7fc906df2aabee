"""Blocks -> chunks of about `size` tokens, cut along headings and sentences, with `overlap` tokens repeated.

- A heading starts a new chunk (unless the current one is still under a quarter full: a short section
  then shares a chunk with the next one, its heading kept inline), and every chunk begins with the path
  of headings it sits under ("Guide > Install"), so a chunk read alone still says what it is about.
- Inside a section, chunks end on sentence boundaries; the sentences at the end of a chunk that fit in
  `overlap` tokens start the next one. A single sentence longer than a chunk is cut by words.
- Tokens are counted the way a BPE tokenizer roughly does: words, punctuation marks and each CJK
  character count one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from services.retrieval.parsing import Block

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+|[^\w\s]|_+")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+(?=\S)|(?<=[。！？；])|\n+")
_MAX_HEADER_SHARE = 4  # the heading path may take at most size/4 tokens


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


@dataclass
class Piece:
    text: str
    positions: list[int] = field(default_factory=list)  # PDF pages the chunk spans


@dataclass
class _Unit:
    text: str
    tokens: int
    page: int
    paragraph_start: bool  # joined with a newline (not a space) to what precedes it


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _units(block: Block, size: int) -> Iterable[_Unit]:
    first = True
    for sentence in split_sentences(block.text):
        n = count_tokens(sentence)
        if n <= size:
            yield _Unit(sentence, n, block.page, first)
            first = False
            continue
        words = sentence.split()
        start = 0
        while start < len(words):  # a sentence longer than a chunk: cut it by words
            take, total = start, 0
            while take < len(words) and (total + count_tokens(words[take]) <= size or take == start):
                total += count_tokens(words[take])
                take += 1
            yield _Unit(" ".join(words[start:take]), total, block.page, first)
            first = False
            start = take


class _Builder:
    def __init__(self, size: int, overlap: int) -> None:
        self.size = max(16, size)
        self.overlap = max(0, min(overlap, self.size // 2))
        self.pieces: list[Piece] = []
        self.units: list[_Unit] = []
        self.tokens = 0
        self.header = ""
        self.header_tokens = 0
        self.has_body = False  # units beyond the overlap carried from the previous chunk

    def set_header(self, path: list[str]) -> None:
        header = " > ".join(path)
        limit = self.size // _MAX_HEADER_SHARE
        if count_tokens(header) > limit:
            header = " ".join(header.split()[:limit])
        self.header, self.header_tokens = header, count_tokens(header)

    @property
    def budget(self) -> int:
        return self.size - self.header_tokens

    def add(self, unit: _Unit) -> None:
        if self.has_body and self.tokens + unit.tokens > self.budget:
            self.flush(carry=True)
        while self.units and self.tokens + unit.tokens > self.budget:  # the carried overlap gives way
            self.tokens -= self.units.pop(0).tokens
        self.units.append(unit)
        self.tokens += unit.tokens
        self.has_body = True

    def flush(self, *, carry: bool) -> None:
        if not self.has_body:
            self.units, self.tokens = [], 0
            return
        body = ""
        for i, u in enumerate(self.units):
            body += u.text if i == 0 else ("\n" if u.paragraph_start else " ") + u.text
        text = f"{self.header}\n{body}" if self.header else body
        pages = sorted({u.page for u in self.units if u.page})
        self.pieces.append(Piece(text, pages))
        kept: list[_Unit] = []
        if carry and self.overlap:
            total = 0
            for u in reversed(self.units):
                if total + u.tokens > self.overlap:
                    break
                kept.insert(0, u)
                total += u.tokens
        self.units, self.tokens, self.has_body = kept, sum(u.tokens for u in kept), False


def chunk_blocks(blocks: Iterable[Block], *, size: int, overlap: int) -> list[Piece]:
    b = _Builder(size, overlap)
    path: list[tuple[int, str]] = []  # (level, title) of the headings above
    for block in blocks:
        if block.heading_level:
            if b.has_body and b.tokens >= b.budget // 4:
                b.flush(carry=False)  # a new section: its chunks should not start with the last one's tail
                b.units, b.tokens = [], 0
            path = [(lvl, t) for lvl, t in path if lvl < block.heading_level] + [(block.heading_level, block.text)]
            if b.has_body:  # a short section shares this chunk: keep its heading inline
                b.add(_Unit(block.text, count_tokens(block.text), block.page, True))
            else:
                b.set_header([t for _, t in path])
            continue
        for unit in _units(block, b.budget):
            b.add(unit)
    b.flush(carry=False)
    return b.pieces
