"""Sessions: one conversation of one user with one agent. Messages and run state are written together in one
MULTI/EXEC (or one script), so a crash never leaves a reply without its state (or the other way round). No DSL
is stored."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from services.common.errors import NotFound
from services.common.json_fields import dump_bytes, dumps
from services.orchestrator.engine.state import SessionState
from services.orchestrator.store import keys, session_fence
from services.orchestrator.store._records import field as _s
from services.orchestrator.store._records import queue_script, write_if_exists

_STATE_FIELDS = ("globals", "history", "path", "retrieval", "memory")
# KEYS: session hash, its messages. ARGV: state json, updated_at, paused run, ttl (0: none), run id, epoch,
# messages... Writes only while the session exists (0 otherwise: a deleted session never comes back
# half-written), and only for the run and epoch that own the session's writes, once (-1 otherwise: another
# replica took the run over, or this turn is stored already; store/session_fence.py).
_SAVE_TURN = session_fence.LUA + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local holder, at, saved = fence(KEYS[1])
if holder ~= nil and (holder ~= ARGV[5] or at > tonumber(ARGV[6]) or saved) then return -1 end
redis.call('HSET', KEYS[1], 'fence', ARGV[5] .. ':' .. ARGV[6] .. ':saved')
for i = 7, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'state_json', ARGV[1], 'updated_at', ARGV[2], 'paused_run', ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
end
return 1
"""
# KEYS: a new session's messages. ARGV: messages... Its first messages, once (the same write sent again after
# its reply was lost finds them).
_FIRST_MESSAGES = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 1, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
return 1
"""


def state_to_json(state: SessionState) -> str:
    return dumps({k: getattr(state, k) for k in _STATE_FIELDS})


def state_from_json(text: str) -> SessionState | None:
    if not text:
        return None
    data = json.loads(text)
    return SessionState(**{k: data.get(k) or ({} if k == "globals" else []) for k in _STATE_FIELDS})


@dataclass(frozen=True)
class SessionRecord:
    id: str
    tenant_id: str
    agent_id: str
    version_id: str
    user_id: str
    name: str
    source: str
    created_at: float
    updated_at: float
    state_json: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    paused_run: str = ""  # a run waiting for the user (UserFillUp): the next request with inputs resumes it

    def state(self) -> SessionState | None:
        return state_from_json(self.state_json)


def message(role: str, content: str, reference: dict[str, Any] | None = None, message_id: str = "") -> dict[str, Any]:
    return {"role": role, "content": content, "id": message_id or uuid.uuid4().hex, "created_at": time.time(),
            "reference": reference or {}}


class SessionStore:
    def __init__(self, redis: aioredis.Redis, ttl_s: int = 0) -> None:
        self.redis = redis
        self.ttl_s = ttl_s  # a session unused this long expires (0: never); every turn renews it
        self._save_turn = redis.register_script(_SAVE_TURN)
        self._first_messages = redis.register_script(_FIRST_MESSAGES)

    def _expire(self, pipe, tenant: str, session_id: str) -> None:
        if self.ttl_s:
            pipe.expire(keys.session(tenant, session_id), self.ttl_s)
            pipe.expire(keys.session_messages(tenant, session_id), self.ttl_s)

    async def create(self, tenant: str, *, agent_id: str, user_id: str = "", name: str = "", version_id: str = "",
                     source: str = "agent", messages: list[dict[str, Any]] | None = None,
                     session_id: str = "") -> SessionRecord:
        async with self.redis.pipeline(transaction=False) as pipe:
            record = self.queue_create(pipe, tenant, agent_id=agent_id, user_id=user_id, name=name,
                                       version_id=version_id, source=source, messages=messages, session_id=session_id)
            await pipe.execute()
        return record  # what was just written: no second round trip to read it back

    def queue_create(self, pipe, tenant: str, *, agent_id: str, user_id: str = "", name: str = "",
                     version_id: str = "", source: str = "agent", messages: list[dict[str, Any]] | None = None,
                     session_id: str = "", state: SessionState | None = None) -> SessionRecord:
        """`create` queued on `pipe` (a run that makes its session sends it with the run's start: one round
        trip); with `state`, the session starts with it (the history a request brought)."""
        session_id = session_id or uuid.uuid4().hex
        now = time.time()
        record = SessionRecord(id=session_id, tenant_id=tenant, agent_id=agent_id, version_id=version_id,
                               user_id=user_id, name=name or "New session", source=source, created_at=now,
                               updated_at=now, state_json=state_to_json(state) if state is not None else "",
                               messages=list(messages or []))
        # Not one transaction: the indexes are the tenant's keys, the session its own (store/keys.py). A list
        # that meets an index entry without its session drops the entry.
        pipe.hset(keys.session(tenant, session_id), mapping={
            "agent_id": agent_id, "version_id": version_id, "user_id": user_id, "name": record.name,
            "source": source, "created_at": now, "updated_at": now, "state_json": record.state_json})
        if record.messages:
            queue_script(pipe, self._first_messages, [keys.session_messages(tenant, session_id)],
                         [dump_bytes(m) for m in record.messages])
        pipe.zadd(keys.agent_sessions(tenant, agent_id), {session_id: now})
        pipe.zadd(keys.user_sessions(tenant, agent_id, user_id), {session_id: now})
        self._expire(pipe, tenant, session_id)
        return record

    async def get(self, tenant: str, session_id: str, *, messages: bool = True) -> SessionRecord:
        """The session; without its `messages` (a run needs only its state) when `messages` is False."""
        if messages:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(keys.session(tenant, session_id))
                pipe.lrange(keys.session_messages(tenant, session_id), 0, -1)
                raw, raw_messages = await pipe.execute()
        else:
            raw, raw_messages = await self.redis.hgetall(keys.session(tenant, session_id)), []
        return self.record(tenant, session_id, raw, raw_messages)

    @staticmethod
    def queue_get(pipe, tenant: str, session_id: str) -> None:
        """`get(..., messages=False)` on `pipe` (with reads of other records in one round trip); its reply goes
        to `record`."""
        pipe.hgetall(keys.session(tenant, session_id))

    @staticmethod
    def record(tenant: str, session_id: str, raw: dict[bytes, bytes], raw_messages: list[bytes] = ()) -> SessionRecord:
        if not raw:
            raise NotFound(f"session {session_id!r} not found")
        return SessionRecord(
            id=session_id, tenant_id=tenant, agent_id=_s(raw, "agent_id"), version_id=_s(raw, "version_id"),
            user_id=_s(raw, "user_id"), name=_s(raw, "name"), source=_s(raw, "source"),
            created_at=float(_s(raw, "created_at") or 0), updated_at=float(_s(raw, "updated_at") or 0),
            state_json=_s(raw, "state_json"), messages=[json.loads(m) for m in raw_messages],
            paused_run=_s(raw, "paused_run"),
        )

    async def list(self, tenant: str, agent_id: str, *, user_id: str = "", page: int = 1, page_size: int = 30,
                   desc: bool = True) -> tuple[list[SessionRecord], int]:
        index = keys.user_sessions(tenant, agent_id, user_id) if user_id else keys.agent_sessions(tenant, agent_id)
        total = await self.redis.zcard(index)
        page, page_size = max(page, 1), max(page_size, 1)
        start = (page - 1) * page_size
        ids = await self.redis.zrange(index, start, start + page_size - 1, desc=desc)
        sessions, gone = [], []
        for sid in ids:
            try:
                sessions.append(await self.get(tenant, sid.decode()))
            except NotFound:  # expired, or deleted between the index read and the get
                gone.append(sid)
        if gone:
            await self.redis.zrem(index, *gone)
        return sessions, total - len(gone)

    def queue_save_turn(self, pipe, tenant: str, session_id: str, new_messages: list[dict[str, Any]],
                        state: SessionState, *, run_id: str, epoch: int, paused_run: str = "") -> None:
        """The turn of run `run_id`, by its owner at `epoch`, as one script queued on `pipe` (a run's end is one
        round trip): like `save_turn`, but only while that owner owns the session's writes, and once
        (store/session_fence.py). Its reply is 1; 0 when the session was deleted meanwhile; -1 when the turn was
        not this owner's to store (another replica took the run over, or the turn is stored already); then
        nothing was written."""
        queue_script(pipe, self._save_turn, [keys.session(tenant, session_id), keys.session_messages(tenant, session_id)],
                     [state_to_json(state), time.time(), paused_run, self.ttl_s, run_id, epoch,
                      *(dump_bytes(m) for m in new_messages)])

    async def save_turn(self, tenant: str, session_id: str, new_messages: list[dict[str, Any]], state: SessionState,
                        *, paused_run: str = "") -> None:
        """Append this turn's messages and replace the run state (and which run waits for the user, if one
        does), atomically; NotFound if the session was deleted meanwhile (a deleted session never comes back
        half-written)."""

        async def fill(pipe) -> None:
            pipe.multi()
            for m in new_messages:
                pipe.rpush(keys.session_messages(tenant, session_id), dump_bytes(m))
            pipe.hset(keys.session(tenant, session_id), mapping={
                "state_json": state_to_json(state), "updated_at": time.time(), "paused_run": paused_run})
            self._expire(pipe, tenant, session_id)

        await write_if_exists(self.redis, keys.session(tenant, session_id), f"session {session_id!r} not found", fill)

    async def set_paused_run(self, tenant: str, session_id: str, run_id: str) -> None:
        async def fill(pipe) -> None:
            pipe.multi()
            pipe.hset(keys.session(tenant, session_id), "paused_run", run_id)

        await write_if_exists(self.redis, keys.session(tenant, session_id), f"session {session_id!r} not found", fill)

    async def remove_turn(self, tenant: str, session_id: str, run_id: str, query: str) -> int:
        """Take a run's turn back out of the session (a double-text's `rollback`): its answer (the message whose
        id is the run's), the user message of `query` before it, and what its state's history gained from that
        message on. Atomic against other writes to the session; how many messages went."""
        key, listed = keys.session(tenant, session_id), keys.session_messages(tenant, session_id)
        dropped: list[bytes] = []

        async def fill(pipe) -> None:
            raw = await pipe.lrange(listed, 0, -1)
            state = state_from_json((await pipe.hget(key, "state_json") or b"").decode())
            dropped[:] = _turn_of(raw, run_id, query)
            pipe.multi()
            for m in dropped:
                pipe.lrem(listed, 1, m)
            if state is not None and query:
                _forget(state, query)
                pipe.hset(key, mapping={"state_json": state_to_json(state), "updated_at": time.time()})

        await write_if_exists(self.redis, key, f"session {session_id!r} not found", fill, also_watch=(listed,))
        return len(dropped)

    async def delete(self, tenant: str, session_id: str) -> None:
        current = await self.get(tenant, session_id)
        async with self.redis.pipeline(transaction=False) as pipe:  # the session's keys, then its index entries
            pipe.delete(keys.session(tenant, session_id), keys.session_messages(tenant, session_id))
            pipe.zrem(keys.agent_sessions(tenant, current.agent_id), session_id)
            pipe.zrem(keys.user_sessions(tenant, current.agent_id, current.user_id), session_id)
            await pipe.execute()

    async def delete_for_agent(self, tenant: str, agent_id: str) -> int:
        """Delete every session of an agent (when the agent goes): their messages and indexes too."""
        ids = [sid.decode() for sid in await self.redis.zrange(keys.agent_sessions(tenant, agent_id), 0, -1)]
        users = await asyncio.gather(*(self.redis.hget(keys.session(tenant, sid), "user_id") for sid in ids))
        async with self.redis.pipeline(transaction=False) as pipe:  # keys of many sessions: one round trip
            for sid in ids:
                pipe.delete(keys.session(tenant, sid), keys.session_messages(tenant, sid))
            for user in {u.decode() for u in users if u is not None}:
                pipe.delete(keys.user_sessions(tenant, agent_id, user))
            pipe.delete(keys.agent_sessions(tenant, agent_id))
            await pipe.execute()
        return len(ids)


def _turn_of(raw: list[bytes], run_id: str, query: str) -> list[bytes]:
    """The stored messages of a run's turn: its answer (id = run id) and the user message before it; with no
    answer, the last message when it is the user's `query`."""
    found = [json.loads(m) for m in raw]
    answer = next((i for i, m in enumerate(found) if m.get("id") == run_id), None)
    end = answer if answer is not None else len(found)
    turn = [raw[answer]] if answer is not None else []
    if query and end > 0 and found[end - 1].get("role") == "user" and found[end - 1].get("content") == query:
        turn.append(raw[end - 1])
    return turn


def _forget(state: SessionState, query: str) -> None:
    """The state's history from the last user message `query` on (what one turn added) goes."""
    for i in range(len(state.history) - 1, -1, -1):
        if list(state.history[i]) == ["user", query]:
            del state.history[i:]
            break
    hist = state.globals.get("sys.history")
    if isinstance(hist, list) and f"user: {query}" in hist:
        cut = len(hist) - 1 - hist[::-1].index(f"user: {query}")
        state.globals["sys.history"] = hist[:cut]
