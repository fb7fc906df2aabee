"""An admission refusal on the A2A door (gateway/refusal.py): a JSON-RPC error whose code says "refused"
(`refusal.JSONRPC_REFUSED`) and whose `data` holds the typed details A2A 1.0 errors carry, here
google.rpc ErrorInfo (reason RESOURCE_EXHAUSTED), RetryInfo (`retryDelay`: when to send again) and QuotaFailure
(subject `tenant:<id>`, the limit), with Retry-After and the RateLimit headers on the response.

The a2a-sdk's dispatcher renders only its own error types (any other A2AError becomes -32603, an internal
error, which would tell a client not to retry), so the handler notes the refusal in the request's state and
raises `Refused` (`refused`), and `answering_refusals`, an ASGI wrapper around the SDK's app, answers that
request with the refusal's error in place of the SDK's. A refusal after a stream started is the SDK's error
event in that stream, as any failure there.
"""

from __future__ import annotations

import json
from typing import Any

from a2a.utils.errors import A2AError
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.json_format import MessageToDict
from google.rpc import error_details_pb2

from gateway import refusal as refusals
from gateway.asgi import ASGIApp, Message, Scope
from gateway.errors import GatewayError

STATE_KEY = "refused"  # in the scope's state: a list the handler appends the refusal that ended the request to
_DOMAIN = "trellis"


class Refused(A2AError):
    """Raised by the handler after `refused` noted the refusal; never rendered by the SDK itself."""

    message = "refused"


def refused(state: dict[str, Any], err: GatewayError) -> Refused:
    """Note `err` (a refusal) for `answering_refusals`, and count it; raise what this returns."""
    holder = state.get(STATE_KEY)
    if holder is not None:
        holder.append(err)
    assert err.refusal is not None
    refusals.count(err.refusal, "a2a", state.get("tenant", ""))
    return Refused(message=err.message)


def error_object(err: GatewayError) -> dict[str, Any]:
    """The refusal's JSON-RPC error object."""
    r = err.refusal
    assert r is not None
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(round(r.retry_after_s * 1e9))
    quota = error_details_pb2.QuotaFailure(violations=[error_details_pb2.QuotaFailure.Violation(
        subject=f"tenant:{r.tenant}", description=r.limit)])
    info = error_details_pb2.ErrorInfo(reason="RESOURCE_EXHAUSTED", domain=_DOMAIN,
                                       metadata={"tenant": r.tenant, "limit": r.limit,
                                                 "retry_after": str(r.retry_after)})
    details = []
    for detail in (info, error_details_pb2.RetryInfo(retry_delay=delay), quota):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(MessageToDict(packed))
    return {"code": refusals.JSONRPC_REFUSED, "message": err.message, "data": details}


def answering_refusals(app: ASGIApp) -> ASGIApp:
    """`app`, whose answer to a request its handler refused (`refused`) is the refusal's error instead."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        noted: list[GatewayError] = scope.get("state", {}).get(STATE_KEY, [])
        body: list[bytes] = []
        replacing = False

        async def send_or_replace(message: Message) -> None:
            nonlocal replacing
            if message["type"] == "http.response.start" and noted:
                replacing = True  # the SDK's error answer: held, replaced once its body (with the id) is in
                return
            if not replacing:
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            try:
                request_id = json.loads(b"".join(body)).get("id")
            except (ValueError, AttributeError):
                request_id = None
            err = noted[-1]
            payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error_object(err)}).encode()
            headers = [(b"content-type", b"application/json")]
            headers += [(k.lower().encode(), v.encode()) for k, v in err.refusal.headers().items()]  # type: ignore[union-attr]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": payload})

        await app(scope, receive, send_or_replace)

    return wrapped
