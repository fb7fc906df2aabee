"""The redis-py internals this package relies on, the version they were read from, and the check that they are
all still there in the shape it uses them (tests/services/orchestrator/store/test_redis_internals.py)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import redis

PINNED_REDIS = "8.1.0"  # the version every internal below was read from (pyproject.toml pins it)

# (where, name, what it must be): checked by the test of this package's internals.
_CALLABLE, _ATTRIBUTE, _VALUE = "callable", "attribute", "value"
INTERNALS: list[tuple[Any, str, str, tuple[str, ...]]] = [
    # the module-level names imported above
    ("redis._parsers", "_AsyncHiredisParser", _CALLABLE, ()),
    ("redis._parsers.hiredis", "NOT_ENOUGH_DATA", _VALUE, ()),
    ("redis.asyncio.client", "EMPTY_RESPONSE", _VALUE, ()),
    ("redis.asyncio.client", "NEVER_DECODE", _VALUE, ()),
    ("redis._parsers", "AsyncCommandsParser", _CALLABLE, ()),
    # the parser: overridden, called, or read
    ("redis._parsers._AsyncHiredisParser", "__init__", _CALLABLE, ("self", "socket_read_size")),
    ("redis._parsers._AsyncHiredisParser", "read_from_socket", _CALLABLE, ("self",)),
    ("redis._parsers._AsyncHiredisParser", "handle_push_response", _CALLABLE, ("self", "response")),
    ("redis._parsers._AsyncHiredisParser", "set_invalidation_push_handler", _CALLABLE,
     ("self", "invalidation_push_handler_func")),
    ("parser", "_reader", _ATTRIBUTE, ()),  # hiredis.Reader, once connected
    ("parser", "_hiredis_PushNotificationType", _ATTRIBUTE, ()),
    # the connection
    ("redis.asyncio.Connection", "pack_command", _CALLABLE, ("self", "args")),
    ("redis.asyncio.Connection", "send_packed_command", _CALLABLE, ("self", "command", "check_health")),
    ("redis.asyncio.Connection", "connect_check_health", _CALLABLE, ("self", "check_health")),
    ("redis.asyncio.Connection", "disconnect", _CALLABLE, ("self", "nowait")),
    ("connection", "is_connected", _ATTRIBUTE, ()),
    ("redis.asyncio.Connection", "read_response", _CALLABLE,
     ("self", "disable_decoding", "timeout", "disconnect_on_error", "push_request")),
    ("redis.asyncio.Connection", "check_health", _CALLABLE, ("self",)),
    ("redis.asyncio.Connection", "should_reconnect", _CALLABLE, ("self",)),
    ("redis.asyncio.Connection", "_close", _CALLABLE, ("self",)),
    ("connection", "_reader", _ATTRIBUTE, ()),  # asyncio.StreamReader, once connected
    ("connection", "_writer", _ATTRIBUTE, ()),  # asyncio.StreamWriter
    ("connection", "_parser", _ATTRIBUTE, ()),
    ("connection", "socket_timeout", _ATTRIBUTE, ()),
    ("asyncio.StreamReader", "_buffer", _ATTRIBUTE, ()),
    ("asyncio.StreamReader", "_eof", _ATTRIBUTE, ()),
    # the pipeline
    ("redis.asyncio.client.Pipeline", "__init__", _CALLABLE,
     ("self", "connection_pool", "response_callbacks", "transaction", "shard_hint")),
    ("redis.asyncio.client.Pipeline", "execute", _CALLABLE, ("self", "raise_on_error")),
    ("redis.asyncio.client.Pipeline", "raise_first_error", _CALLABLE, ("self", "commands", "response")),
    ("redis.asyncio.client.Pipeline", "reset", _CALLABLE, ("self",)),
    ("pipeline", "command_stack", _ATTRIBUTE, ()),
    ("pipeline", "is_transaction", _ATTRIBUTE, ()),
    ("pipeline", "explicit_transaction", _ATTRIBUTE, ()),
    ("pipeline", "watching", _ATTRIBUTE, ()),
    ("pipeline", "scripts", _ATTRIBUTE, ()),
    ("pipeline", "connection", _ATTRIBUTE, ()),
    ("pipeline", "response_callbacks", _ATTRIBUTE, ()),
    ("redis.asyncio.Redis", "pipeline", _CALLABLE, ("self", "transaction", "shard_hint")),
    ("redis.asyncio.Redis", "aclose", _CALLABLE, ("self", "close_connection_pool")),
    # the cluster client's table of commands (KeptCommands)
    ("redis._parsers.AsyncCommandsParser", "initialize", _CALLABLE, ("self", "node")),
    ("redis._parsers.AsyncCommandsParser", "commands", _ATTRIBUTE, ()),  # set by __init__: {} until read
    ("redis._parsers.AsyncCommandsParser", "node", _ATTRIBUTE, ()),  # a slot: there before its first set
    ("redis.asyncio.cluster.RedisCluster", "commands_parser", _ATTRIBUTE, ()),
    # the cluster client's connection class (fast_cluster)
    ("cluster", "connection_kwargs", _ATTRIBUTE, ()),  # the same dict as its nodes manager's (the test checks)
    ("cluster", "nodes_manager", _ATTRIBUTE, ()),
    ("cluster.nodes_manager", "startup_nodes", _ATTRIBUTE, ()),
    ("cluster.nodes_manager", "connection_kwargs", _ATTRIBUTE, ()),
    ("redis.asyncio.cluster.ClusterNode", "connection_class", _ATTRIBUTE, ()),
    # the pool
    ("redis.asyncio.BlockingConnectionPool", "get_connection", _CALLABLE, ("self",)),
    ("redis.asyncio.BlockingConnectionPool", "ensure_connection", _CALLABLE, ("self", "connection")),
    ("redis.asyncio.BlockingConnectionPool", "release", _CALLABLE, ("self", "connection")),
    ("redis.asyncio.BlockingConnectionPool", "make_connection", _CALLABLE, ("self",)),
    ("pool", "_available_connections", _ATTRIBUTE, ()),
    ("pool", "_in_use_connections", _ATTRIBUTE, ()),
    ("pool", "_condition", _ATTRIBUTE, ()),
    ("asyncio.Condition", "_waiters", _ATTRIBUTE, ()),
]


def missing_internals(instances: dict[str, Any]) -> list[str]:
    """Each internal of `INTERNALS` that is gone or changed shape, as `where.name: what`. `instances`: a live
    "parser", "connection" (connected), "pipeline" and "pool", for the attributes only instances have."""
    import importlib

    def resolve(path: str) -> Any:
        if path in instances:
            return instances[path]
        if path == "asyncio.Condition":
            return asyncio.Condition()
        if path == "asyncio.StreamReader":
            return asyncio.StreamReader()
        module, _, rest = path.partition(".")
        obj = importlib.import_module(module)
        for part in rest.split(".") if rest else []:
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
        return obj

    missing = []
    if redis.__version__ != PINNED_REDIS:
        missing.append(f"redis.__version__: {redis.__version__}, not the {PINNED_REDIS} these internals were read from")
    for where, name, kind, params in INTERNALS:
        try:
            obj = resolve(where)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{where}: gone ({exc})")
            continue
        if not hasattr(obj, name):
            missing.append(f"{where}.{name}: gone")
            continue
        value = getattr(obj, name)
        if kind == _CALLABLE:
            if not callable(value):
                missing.append(f"{where}.{name}: no longer callable")
                continue
            if params:
                names = tuple(p.name for p in inspect.signature(value).parameters.values())
                if isinstance(value, type):
                    names = ("self", *names)
                if names[:len(params)] != params and not set(params) <= set(names):
                    missing.append(f"{where}.{name}: parameters {names}, expected {params}")
    return missing
