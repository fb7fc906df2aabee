"""Moves records stored under the key layout before Redis Cluster hash tags to today's keys (store/keys.py).

Until hash tags were added, keys read `t:<tenant>:agent:<id>`, `t:<tenant>:session:<id>:messages`,
`run:<id>:lease`...; today the part that decides the slot is in braces: `t:{<tenant>}:agent:<id>`,
`t:<tenant>:session:{<id>}:messages`, `run:{<id>}:lease`. Without this step an upgraded orchestrator would
not find the agents, sessions, MCP servers and run logs stored before. It runs at start-up, once per Redis:
a marker key says the layout is current, so later starts cost one GET. Renames keep each key's TTL; a
replica starting at the same time renames the same keys at most once (RENAMENX), and an old key whose new
name already exists is left in place and counted, never overwritten.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import redis.asyncio as aioredis

log = logging.getLogger(__name__)

MARKER = "trellis:key_layout"
CURRENT = "2"  # 2: hash tags

_ID = r"[A-Za-z0-9_.@-]{1,128}"
# old key -> today's, by the part that moved into braces
_RULES = [
    (re.compile(rf"t:({_ID}):((?:agent|agents|mcp|mcps|version):.*)"), r"t:{\1}:\2"),
    (re.compile(rf"t:({_ID}):(session|run):({_ID})((?::.*)?)"), r"t:\1:\2:{\3}\4"),
    (re.compile(rf"run:({_ID}):(lease|cancel)"), r"run:{\1}:\2"),
]


def new_name(key: str) -> str | None:
    """Today's name of a key of the old layout; None for a key that did not move."""
    if "{" in key:
        return None
    for pattern, template in _RULES:
        if pattern.fullmatch(key):
            return pattern.sub(template, key, count=1)
    return None


@dataclass(frozen=True)
class Upgrade:
    moved: int = 0
    kept: int = 0  # old keys whose new name was already taken: left as they were


async def upgrade(redis: aioredis.Redis, batch: int = 1000) -> Upgrade:
    """Rename every old-layout key, then mark the layout current. Nothing to do after the first time."""
    if (await redis.get(MARKER)) == CURRENT.encode():
        return Upgrade()
    moved = kept = 0
    for pattern in ("t:*", "run:*"):
        names: list[tuple[bytes, str]] = []
        async for raw in redis.scan_iter(match=pattern, count=batch):
            new = new_name(raw.decode())
            if new is not None:
                names.append((raw, new))
        for start in range(0, len(names), batch):
            chunk = names[start:start + batch]
            pipe = redis.pipeline(transaction=False)
            for old, new in chunk:
                pipe.renamenx(old, new)
            # "no such key": another replica renamed it first, which is what this one wanted.
            for (old, new), result in zip(chunk, await pipe.execute(raise_on_error=False)):
                if result is True or result == 1:
                    moved += 1
                elif result is False or result == 0:
                    kept += 1
                    log.warning("Redis key %s was not moved: %s exists already", old.decode(), new)
    await redis.set(MARKER, CURRENT)
    if moved or kept:
        log.info("Redis key layout upgraded: %d keys moved, %d kept", moved, kept)
    return Upgrade(moved, kept)
