"""Streaming clients, as users of the HTTP gateway are: each sends a turn on its session (the envelope route,
`on_disconnect: continue`), reads the stream to its `done`, and when the stream breaks, or ends with an error
while the run's status (GET .../runs/<id>) says it goes on, it rejoins with `Last-Event-ID`, for as long as
`rejoin_budget_s`. What each client saw of each run is
kept (`RunSeen`) for chaos/invariants.py: the run's id, what the screen shows of each component (a component's
text is dropped when it says it started again, as a UI does), and how the stream ended.

Each turn's query carries a nonce of its own (`run s<session>t<turn> ...`), which the model server reads
(chaos/model_server.py), so the suite knows which model requests belong to which run without asking the stack.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

TERMINAL = {"succeeded": "finished", "failed": "failed", "cancelled": "cancelled"}  # run status -> outcome


@dataclass
class RunSeen:
    """One run as one client saw it."""

    nonce: str
    client: int
    started_at: float  # time.monotonic() when the turn was sent
    run_id: str = ""
    thread_id: str = ""
    first_token_at: float | None = None
    ended_at: float | None = None  # when the client had the run's own end
    outcome: str = ""  # finished | failed | cancelled | gave_up | refused (the turn never became a run)
    error: str = ""
    screen: dict[str, str] = field(default_factory=dict)  # component -> the text shown for it
    restarted: list[str] = field(default_factory=list)
    rejoins: int = 0
    left: bool = False  # the client left mid-stream on purpose (soak churn)
    trace: list[str] = field(default_factory=list)  # what came, compactly (a violation's example shows it)

    def shown(self) -> str:
        return "".join(self.screen.values())

    def note(self, what: str) -> None:
        if self.trace and self.trace[-1].split(" x")[0] == what:  # "content LLM:b x12"
            count = int(self.trace[-1].split(" x")[1]) if " x" in self.trace[-1] else 1
            self.trace[-1] = f"{what} x{count + 1}"
        elif len(self.trace) < 60:
            self.trace.append(what)

    def show(self, env: dict[str, Any]) -> None:
        kind, node, data = env.get("type"), env.get("node_name") or "", env.get("data") or {}
        if kind == "error":
            self.note(f"error {str(data.get('message', ''))[:60]}")
        elif kind == "done" and data.get("elapsed_time") is None:
            self.note("done (the stream ended without the run's end)")
        else:
            self.note(f"{kind} {data.get('status', '')} {node}".replace("  ", " ").strip())
        self.run_id = env.get("run_id") or self.run_id
        self.thread_id = env.get("thread_id") or self.thread_id
        if kind == "content":
            self.screen[node] = self.screen.get(node, "") + str(data.get("delta", ""))
            if self.first_token_at is None:
                self.first_token_at = time.monotonic()
        elif kind == "status" and data.get("status") == "node_restarted":
            self.restarted.append(node)
            self.screen.pop(node, None)  # what it sent before is void; it comes again
        elif kind == "status" and data.get("status") == "node_started":
            self.screen.setdefault(node, "")


@dataclass
class LoadConfig:
    url: str  # the gateway, http://127.0.0.1:<port>
    key: str  # an API key
    agent_id: str
    clients: int
    turns_per_session: int = 3
    rejoin_budget_s: float = 120.0  # a client keeps rejoining a run this long after its stream first broke
    leave_probability: float = 0.0  # soak churn: a client leaves mid-stream (and its run is cancelled)


class Load:
    """Clients of the gateway; `seen` has every turn of every client."""

    def __init__(self, cfg: LoadConfig, seed: int) -> None:
        self.cfg = cfg
        self.seen: list[RunSeen] = []
        self.users: set[asyncio.Task] = set()  # open loop: the users connected now
        self._sessions = itertools.count()  # each session's number, in its turns' nonces
        self._rng = random.Random(seed)  # seeded: which turns leave, and where
        self._headers = {"Authorization": f"Bearer {cfg.key}"}

    async def run(self, stop: asyncio.Event) -> None:
        """Closed loop (the chaos suite, the soak's capacity steps): each client sends its next turn when the
        last one ended, `turns_per_session` turns a session, until `stop`."""
        await asyncio.gather(*(self._client(i, stop) for i in range(self.cfg.clients)))

    async def arrivals(self, runs_per_s: float, stop: asyncio.Event, gate: asyncio.Event) -> None:
        """Open loop (the soak): users arrive at random (a Poisson process) while `gate` is set, each connecting,
        sending 1 to 3 turns on a new session and leaving, so about `runs_per_s` runs start each second."""
        mean_turns = 2.0
        index = 0
        while not stop.is_set():
            await gate.wait()
            await asyncio.sleep(self._rng.expovariate(runs_per_s / mean_turns))
            if stop.is_set() or not gate.is_set():
                continue
            user = asyncio.create_task(self._session(index, self._rng.randint(1, 3)))
            self.users.add(user)
            user.add_done_callback(self.users.discard)
            index += 1

    async def _client(self, index: int, stop: asyncio.Event) -> None:
        async with self._http() as http:
            while not stop.is_set():
                await self._turns(http, index, self.cfg.turns_per_session, stop)

    async def _session(self, index: int, turns: int) -> None:
        async with self._http() as http:
            await self._turns(http, index, turns, None)

    def _http(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60))

    async def _turns(self, http: aiohttp.ClientSession, client: int, turns: int, stop: asyncio.Event | None) -> None:
        """Up to `turns` turns on one new session (fewer when `stop` is set or the session cannot go on)."""
        thread = ""
        session = next(self._sessions)
        for turn in range(turns):
            if stop is not None and stop.is_set():
                return
            seen = RunSeen(nonce=f"s{session}t{turn}", client=client, started_at=time.monotonic())
            self.seen.append(seen)
            leave_after = self._rng.randint(1, 20) if self._rng.random() < self.cfg.leave_probability else None
            await self.turn(http, seen, thread, leave_after)
            if seen.outcome == "refused":
                await asyncio.sleep(1.0)  # as a client backs off before it tries again
            if seen.outcome not in ("finished", "failed"):
                return  # left, refused, gave up: the session may still be busy
            thread = seen.thread_id

    async def turn(self, http: aiohttp.ClientSession, seen: RunSeen, thread: str, leave_after: int | None) -> None:
        body: dict[str, Any] = {"query": f"run {seen.nonce} go", "on_disconnect": "cancel" if leave_after else "continue"}
        if thread:
            body["thread_id"] = thread
        path = f"{self.cfg.url}/api/v1/agents/{self.cfg.agent_id}/stream"
        last_id = ""
        broke_at: float | None = None
        pause = 0.2
        while True:
            headers = {**self._headers, **({"Last-Event-ID": last_id} if last_id else {})}
            try:
                last_id, ended = await self._read(http, path, body, headers, seen, last_id, leave_after)
                if ended is None:  # an error, then `done`: the run's own failure, or the stream's end only?
                    ended = await self._ended(http, seen)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                ended, seen.error = False, f"{type(exc).__name__}: {exc}"[:200]
                seen.note(f"BROKE {type(exc).__name__}")
            if ended or seen.left:
                if seen.left:
                    seen.outcome = "left"
                seen.ended_at = time.monotonic()
                return
            if not last_id:  # refused before it started (no run id): not a run this client saw
                seen.outcome = "refused"
                return
            broke_at = broke_at or time.monotonic()
            if time.monotonic() - broke_at > self.cfg.rejoin_budget_s:
                seen.outcome = "gave_up"
                return
            seen.rejoins += 1
            seen.note(f"REJOIN after {last_id.rsplit(':', 1)[-1]}")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 4.0)

    async def _ended(self, http: aiohttp.ClientSession, seen: RunSeen) -> bool:
        """Whether the run ended (its status says so, as a client asks: GET .../runs/<id>); sets the outcome."""
        url = f"{self.cfg.url}/api/v1/agents/{self.cfg.agent_id}/runs/{seen.run_id}"
        async with http.get(url, headers=self._headers) as resp:
            status = ((await resp.json()).get("data") or {}).get("status", "") if resp.status == 200 else ""
        seen.note(f"STATUS {status}")
        if status in TERMINAL:
            seen.outcome = TERMINAL[status]
            return True
        return False

    async def _read(self, http: aiohttp.ClientSession, path: str, body: dict[str, Any], headers: dict[str, str],
                    seen: RunSeen, last_id: str, leave_after: int | None) -> tuple[str, bool | None]:
        """One request's stream: (the last event id seen, whether the run's own end came: None when `done`
        followed an error, which may be the run's or the stream's)."""
        failed = False
        frames = 0
        async with http.post(path, json=body, headers=headers) as resp:
            if resp.status != 200:
                raw = await resp.read()
                try:  # the envelope's error: its message
                    text = str((orjson.loads(raw).get("data") or {}).get("message", ""))
                except (orjson.JSONDecodeError, AttributeError):
                    text = raw[:200].decode(errors="replace")
                seen.error = f"HTTP {resp.status}: {text[:160]}"
                return last_id, False
            block: dict[str, str] = {}
            async for raw in resp.content:
                line = raw.decode().rstrip("\r\n")
                if line:
                    name, _, value = line.partition(":")
                    block[name] = value.strip()
                    continue
                if block.get("id"):
                    last_id = block["id"]
                data = block.get("data")
                block = {}
                if not data:
                    continue
                env = orjson.loads(data)
                if env.get("run_id") and not last_id:
                    last_id = f"{env['run_id']}:0"  # no stored event yet: rejoin from the start
                seen.show(env)
                frames += 1
                if leave_after is not None and frames >= leave_after:
                    seen.left = True
                    return last_id, False
                if env.get("type") == "error":
                    failed = True
                    seen.error = str((env.get("data") or {}).get("message", ""))[:300]
                elif env.get("type") == "done":
                    if failed:
                        return last_id, None
                    seen.outcome = "cancelled" if (env.get("data") or {}).get("cancelled") else "finished"
                    return last_id, True
        return last_id, False
