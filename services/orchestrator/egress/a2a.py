"""Talking to remote A2A agents through the official a2a-sdk client: one message, its answer as text chunks.

`A2AConversation(http, url, headers=...)` sends one message (`SendStreamingMessage` when the agent's card says
it streams and the caller wants it, else `SendMessage`) and `answer(text)` yields the answer as it arrives. The
URL is the agent's card (`.../agent-card.json`), the agent's base URL (its card at
`/.well-known/agent-card.json`), or, when no card is found there, the JSON-RPC endpoint itself (A2A 1.0).

What counts as the answer: the text parts of the task's artifacts, in the order they arrive (an appended chunk
is yielded as it comes; a snapshot yields what it adds to what was yielded); with no artifact, the text of the
final status message or of a direct message reply. After the stream: `task_id`, `context_id` (continue the
remote conversation with it) and `state` ("completed", "input_required", ...). A failed, rejected or cancelled
task raises `A2AError` with the agent's message.

Every connection goes through the SSRF guard of `http.OutboundHttp` (the card's URL and the endpoint it names,
checked when each connection opens: `_guarded_httpx.py`); redirects are not followed and the process proxy
settings are ignored. Closing `answer` before the task ended (the run was cancelled) cancels the remote task
(`CancelTask`): A2A tasks outlive their connections.

a2a-sdk and httpx are imported when a run first calls an A2A agent (the orchestrator starts without them).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping

from services.orchestrator.egress.http import OutboundHttp

if TYPE_CHECKING:
    import httpx
    from a2a.client import Client
    from a2a.types import a2a_pb2

log = logging.getLogger(__name__)

__all__ = ["A2AConversation", "A2AError"]

CARD_PATH = "/.well-known/agent-card.json"
# States after which the remote task no longer runs (a direct message reply counts as "completed").
_ENDED = frozenset({"completed", "failed", "canceled", "rejected", "input_required", "auth_required"})
CANCEL_WAIT_S = 10.0  # how long a cancelled run waits for the remote agent to take its CancelTask


class A2AError(Exception):
    """The remote agent could not be asked, or its task did not complete; the message says why."""


def _state_name(state: int) -> str:
    from a2a.types import a2a_pb2

    return a2a_pb2.TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def _text(parts: Any) -> str:
    return "".join(p.text for p in parts if p.HasField("text"))


class A2AConversation:
    """One message to a remote A2A agent (see the module docstring)."""

    def __init__(self, http: OutboundHttp, url: str, *, headers: Mapping[str, str] | None = None,
                 timeout_s: float = 60.0, streaming: bool = True) -> None:
        self.http = http
        self.url = url.strip()
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.streaming = streaming
        self.task_id = ""
        self.context_id = ""
        self.state = ""
        self._artifacts: dict[str, str] = {}  # artifact id -> its text so far
        self._sent = 0  # characters of the artifacts' text yielded so far
        self._final = ""  # the final status message, or a direct message reply

    # ------------------------------------------------------------------ the client
    def _http_client(self) -> httpx.AsyncClient:
        import httpx

        from services.orchestrator.egress._guarded_httpx import guarded_transport

        return httpx.AsyncClient(headers=self.headers, timeout=httpx.Timeout(self.timeout_s), trust_env=False,
                                 follow_redirects=False, transport=guarded_transport(self.http))

    async def _card(self, http: httpx.AsyncClient) -> a2a_pb2.AgentCard:
        from a2a.client import A2ACardResolver, AgentCardResolutionError
        from a2a.types import a2a_pb2

        base, path = self.url.rstrip("/"), CARD_PATH
        if self.url.endswith(".json"):  # the card's own URL
            base, _, name = self.url.rpartition("/")
            path = name
            if base.endswith("/.well-known"):
                base, path = base.removesuffix("/.well-known"), f".well-known/{name}"
        try:
            return await A2ACardResolver(http, base, agent_card_path=path).get_agent_card()
        except AgentCardResolutionError as exc:
            if self.url.endswith(".json") or getattr(exc, "status_code", None) != 404:
                raise A2AError(f"cannot read the agent card of {self.url}: {exc}") from None
        # No card at the base URL: it is the JSON-RPC endpoint itself.
        return a2a_pb2.AgentCard(
            name=self.url, capabilities=a2a_pb2.AgentCapabilities(streaming=True),
            supported_interfaces=[a2a_pb2.AgentInterface(protocol_binding="JSONRPC", url=self.url,
                                                         protocol_version="1.0")])

    # ------------------------------------------------------------------ one message
    async def answer(self, text: str, *, context_id: str = "", task_id: str = "") -> AsyncIterator[str]:
        """The answer to `text` as it arrives (see the module docstring); raises A2AError or EgressBlocked."""
        from a2a.client import A2AClientError, ClientConfig, ClientFactory
        from a2a.types import a2a_pb2

        await self.http.check_url(self.url)  # a clear refusal before anything is sent
        terminal = False
        async with self._http_client() as http:
            try:
                card = await self._card(http)
                client = ClientFactory(ClientConfig(httpx_client=http, streaming=self.streaming)).create(card)
            except (A2AClientError, ValueError) as exc:
                raise A2AError(f"cannot reach the agent at {self.url}: {exc}") from None
            message = a2a_pb2.Message(message_id=uuid.uuid4().hex, role=a2a_pb2.ROLE_USER, context_id=context_id,
                                      task_id=task_id, parts=[a2a_pb2.Part(text=text)])
            stream = client.send_message(a2a_pb2.SendMessageRequest(message=message))
            try:
                async for event in stream:
                    for chunk in self._observe(event):
                        yield chunk
                    terminal = self.state in _ENDED
            except A2AClientError as exc:
                raise A2AError(f"the agent at {self.url} failed: {exc}") from None
            finally:
                await stream.aclose()
                if not terminal and self.task_id:  # cut short (the run was cancelled): stop the remote task
                    await self._cancel(client)
                await client.close()
        if self.state in ("failed", "rejected", "canceled"):
            raise A2AError(f"the agent at {self.url} ended its task {self.state}"
                           + (f": {self._final}" if self._final else ""))
        if not self._sent and self._final:
            yield self._final

    async def _cancel(self, client: Client) -> None:
        from a2a.types import a2a_pb2

        try:
            await asyncio.wait_for(asyncio.shield(client.cancel_task(a2a_pb2.CancelTaskRequest(id=self.task_id))),
                                   CANCEL_WAIT_S)
        except Exception as exc:  # the run is cancelled anyway; the remote task may run on
            log.warning("could not cancel task %s of the A2A agent at %s: %s", self.task_id, self.url, exc)

    def _observe(self, event: a2a_pb2.StreamResponse) -> list[str]:
        """What `event` adds to the answer, and the task's ids and state from it."""
        if event.HasField("message"):  # a direct reply: no task
            self.context_id = self.context_id or event.message.context_id
            self._final = _text(event.message.parts)
            self.state = "completed"
            return []
        if event.HasField("task"):
            task = event.task
            self.task_id, self.context_id = task.id, task.context_id or self.context_id
            chunks = [self._artifact(a, append=False) for a in task.artifacts]
            self._status(task.status)
            return [c for c in chunks if c]
        if event.HasField("artifact_update"):
            update = event.artifact_update
            self.task_id = self.task_id or update.task_id
            chunk = self._artifact(update.artifact, append=update.append)
            return [chunk] if chunk else []
        if event.HasField("status_update"):
            self.task_id = self.task_id or event.status_update.task_id
            self._status(event.status_update.status)
        return []

    def _artifact(self, artifact: a2a_pb2.Artifact, *, append: bool) -> str:
        before = self._artifacts.get(artifact.artifact_id, "")
        now = before + _text(artifact.parts) if append else _text(artifact.parts)
        self._artifacts[artifact.artifact_id] = now
        if not now.startswith(before):  # replaced, not extended: what was sent stays sent
            return ""
        self._sent += len(now) - len(before)
        return now[len(before):]

    def _status(self, status: a2a_pb2.TaskStatus) -> None:
        self.state = _state_name(status.state)
        if status.HasField("message"):
            self._final = _text(status.message.parts) or self._final

