"""Memory for model calls: the prompt in parts, trimmed to the model's context (RAGFlow's TokenBufferMemory).

`Prompt` holds `head` (system messages), `history` (earlier turns: the part memory may drop) and `tail`
(this turn: prompts, then the tool exchange). `Prompt.fit(budget)` keeps history newest first while it
fits and, if head + tail alone are too long, cuts their longest message, so a call never overflows.
Token counts are estimates (no tokenizer per model): pessimistic on purpose.

The context size comes from `Services.extra["llm_context_tokens"]` (an int, or {model_id: int, "": default})
until the gateway reports it per model; else `DEFAULT_CONTEXT_TOKENS`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from services.clients.llm_models import Message
from services.orchestrator.components.base import NodeContext

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_TOKENS = 8192


def estimate_tokens(text: str) -> int:
    # Deliberately pessimistic (3 bytes a token: ~25% over for English, about right for CJK and
    # code): an over-estimate wastes a little context, an under-estimate overflows it.
    return len(text.encode("utf-8")) // 3 + 1


def message_tokens(m: Message) -> int:
    n = 4 + estimate_tokens(m.content)
    for tc in m.tool_calls:
        n += 4 + estimate_tokens(tc.name) + estimate_tokens(tc.arguments)
    return n


def context_tokens(ctx: NodeContext, model_id: str) -> int:
    conf = ctx.services.extra.get("llm_context_tokens") if ctx.services.extra else None
    if isinstance(conf, dict):
        conf = conf.get(model_id, conf.get(""))
    try:
        return max(512, int(conf)) if conf else DEFAULT_CONTEXT_TOKENS
    except (TypeError, ValueError):
        return DEFAULT_CONTEXT_TOKENS


def prompt_budget(ctx: NodeContext, conf: Any) -> int:
    """Tokens the messages may use: 97% of the context (RAGFlow) minus room for the answer.

    A `max_tokens` larger than the context (templates ask for 128000 of models we know as 8192) cannot be
    honoured anyway: it reserves at most half the context, so the prompt itself is never cut away."""
    total = context_tokens(ctx, conf.model_id)
    reserve = min(conf.max_tokens, total // 2) if conf.max_tokens > 0 else min(1024, total // 4)
    return max(128, int(total * 0.97) - reserve)


def truncate(m: Message, tokens: int) -> Message:
    keep = max(0, (tokens - 11) * 3)  # room for the 4-token message overhead and the marker
    raw = m.content.encode("utf-8")
    if len(raw) <= keep:
        return m
    return replace(m, content=raw[:keep].decode("utf-8", errors="ignore") + "\n…[truncated]")


@dataclass(slots=True)
class Prompt:
    head: list[Message] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    tail: list[Message] = field(default_factory=list)

    def fit(self, budget: int) -> list[Message]:
        head, tail = list(self.head), list(self.tail)
        fixed = head + tail
        total = sum(message_tokens(m) for m in fixed)
        # The turn itself must fit: shorten its longest message (a huge system prompt, a tool
        # observation, a pasted document) until it does.
        for _ in range(len(fixed) * 2):
            if total <= budget:
                break
            i = max(range(len(fixed)), key=lambda k: estimate_tokens(fixed[k].content))
            size = message_tokens(fixed[i])
            cut = truncate(fixed[i], max(16, size - (total - budget)))
            if cut is fixed[i]:
                break
            total += message_tokens(cut) - size
            fixed[i] = cut
        head, tail = fixed[:len(head)], fixed[len(head):]
        kept: list[Message] = []
        room = budget - total
        for m in reversed(self.history):  # newest first, stop at the first that does not fit
            size = message_tokens(m)
            if size > room:
                break
            kept.append(m)
            room -= size
        if len(kept) < len(self.history):
            log.debug("memory: kept %d of %d history messages", len(kept), len(self.history))
        return head + kept[::-1] + tail
