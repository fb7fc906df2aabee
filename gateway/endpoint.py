"""`@endpoint(dialect)`: authenticate, then render any error in the route's dialect, never as a trace.

    @endpoint(Dialect.RAGFLOW)
    async def get_agent(request: web.Request) -> web.StreamResponse:
        tenant = request[TENANT]
        ...
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Awaitable, Callable

import grpc
from aiohttp import web

from gateway.auth import KeyRing, api_key_id
from gateway.contract import CONTRACT, Contract
from gateway.dialects import Dialect
from gateway import refusal
from gateway.errors import GatewayError, from_rpc_error

log = logging.getLogger(__name__)

KEYS = web.AppKey("keys", KeyRing)
TENANT = web.RequestKey("tenant", str)  # the tenant the request's API key maps to
API_KEY_ID = web.RequestKey("api_key_id", str)  # that key's id, for its own limits (gateway/auth.py)
STREAM = web.RequestKey("stream", web.StreamResponse)  # the SSE response, once its headers went out

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

__all__ = ["KEYS", "TENANT", "API_KEY_ID", "STREAM", "Dialect", "endpoint"]


def endpoint(dialect: Dialect, *, contract: Contract | None = None, public: bool = False) -> Callable[[Handler], Handler]:
    """`contract` declares the route's body, query and answer (gateway/contract.py); `public` routes need no key."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapped(request: web.Request) -> web.StreamResponse:
            if contract is not None:
                request[CONTRACT] = contract
            if not public:
                header = request.headers.get("Authorization")
                tenant = request.app[KEYS].tenant_for(header)
                if tenant is None:
                    return dialect.error_response(dialect.auth_error(missing=not (header or "").strip()))
                request[TENANT] = tenant
                request[API_KEY_ID] = api_key_id(header)
            try:
                return await handler(request)
            except GatewayError as err:
                return _late(request, err, dialect)
            except grpc.aio.AioRpcError as exc:
                return _late(request, from_rpc_error(exc), dialect)
            except (asyncio.CancelledError, web.HTTPException):
                raise
            except ConnectionResetError:
                # The client left while we wrote; the gRPC call was cancelled on the way out.
                log.info("client went away during %s %s", request.method, request.path)
                if (stream := request.get(STREAM)) is not None:
                    return stream
                raise
            except Exception:
                log.exception("unhandled error in %s %s", request.method, request.path)
                err = GatewayError("internal error in the gateway; see its log", code=grpc.StatusCode.INTERNAL)
                return _late(request, err, dialect)
            finally:
                # The response refers to its request: kept in the request as well, the two would be a cycle
                # that only a full collection frees.
                request.pop(STREAM, None)

        wrapped.dialect = dialect  # type: ignore[attr-defined]
        wrapped.contract = contract  # type: ignore[attr-defined]
        wrapped.public = public  # type: ignore[attr-defined]
        return wrapped

    return decorate


def _late(request: web.Request, err: GatewayError, dialect: Dialect) -> web.StreamResponse:
    """Once an SSE response has started, its status is sent: the stream writers report errors in-band."""
    if err.refusal is not None:
        refusal.count(err.refusal, dialect.name, request.get(TENANT, ""))
    stream = request.get(STREAM)
    if stream is not None:
        log.error("error after the stream started on %s: %s", request.path, err.message)
        return stream
    return dialect.error_response(err)
