"""Outbound gRPC channels, and the metadata every call sends on them: the current request id, and the current
span as W3C `traceparent` when tracing is on (services/common/tracing.py), for the next service."""

from __future__ import annotations

import weakref

import grpc

from services.common import context as ctxvars
from services.common import tracing


def outbound_metadata(metadata: tuple | grpc.aio.Metadata | None = None) -> grpc.aio.Metadata | None:
    """`metadata` plus the current request id and trace headers (none it already has); None when there is
    nothing to send. Every call passes it (`metadata=outbound_metadata()`): channels have no interceptors."""
    rid = ctxvars.request_id.get()
    trace_headers = tracing.inject() if tracing.ACTIVE else None
    if not rid and not trace_headers:
        return metadata if metadata is None or isinstance(metadata, grpc.aio.Metadata) else grpc.aio.Metadata(*metadata)
    out = grpc.aio.Metadata(*(metadata or ()))
    if rid and ctxvars.REQUEST_ID_HEADER not in out:
        out.add(ctxvars.REQUEST_ID_HEADER, rid)
    for key, value in (trace_headers or {}).items():
        if key not in out:
            out.add(key, value)
    return out


# Large messages: DSLs and documents can exceed gRPC's 4 MB default.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MESSAGE_SIZE_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
# What a stream of turns sends in one message at most, about (services/common/turn_client.py, turn_server.py).
BATCH_BYTES = 4 * 1024 * 1024


def in_batches(items: list, sizes: list[int]) -> list[list]:
    """`items` (of `sizes` bytes) in consecutive runs of at most `BATCH_BYTES`, at least one item each."""
    if sum(sizes) <= BATCH_BYTES:
        return [items] if items else []
    batches: list[list] = [[]]
    size = 0
    for item, length in zip(items, sizes):
        if batches[-1] and size + length > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += length
    return batches
# Spread calls over every replica behind a headless Service (k8s DNS lists each pod). A peer that went
# away is tried again at least every second (gRPC's default backs off to 120 s), so a restarted peer is
# reached within the retry budget of services/clients/_rpc.py.
CHANNEL_OPTIONS = [*MESSAGE_SIZE_OPTIONS, ("grpc.lb_policy_name", "round_robin"), ("grpc.max_reconnect_backoff_ms", 1000)]
# Servers end connections after a while so clients re-resolve and find new pods (HPA scale-out). Streams
# already open keep going for the grace: longer than any run may last (gateway 15 min, Agent 20 min).
SERVER_OPTIONS = [
    *MESSAGE_SIZE_OPTIONS,
    ("grpc.max_connection_age_ms", 5 * 60 * 1000),
    ("grpc.max_connection_age_grace_ms", 60 * 60 * 1000),
]


_targets: weakref.WeakKeyDictionary[grpc.aio.Channel, str] = weakref.WeakKeyDictionary()


def open_channel(address: str) -> grpc.aio.Channel:
    """An insecure channel (the mesh or NetworkPolicies secure the hop). No client interceptors: grpc.aio
    wraps every call and every streamed message of an intercepted channel in an extra task and queue (its
    cost per token: docs/streaming.md); each call passes `metadata=outbound_metadata()` instead."""
    channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    _targets[channel] = address
    return channel


def channel_target(channel: grpc.aio.Channel) -> str | None:
    """The address `open_channel` opened `channel` to (grpc.aio does not tell); None for another channel."""
    return _targets.get(channel)
