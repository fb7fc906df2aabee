"""What the rest of the store needs of redis-py's insides beyond the client: the agent cache of a connection
(its invalidations, its unread bytes, its socket), and the cluster client's connection class and table of
commands."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import redis.asyncio as aioredis
from redis._parsers import AsyncCommandsParser

from services.orchestrator.store._redis_fast.connection import fast_connection_class


# What store/agent_cache.py needs of a connection.
def on_invalidation(conn: aioredis.Connection, handler: Callable[[list], Awaitable[Any]]) -> None:
    """Hand the connection's invalidation push messages (CLIENT TRACKING, RESP3) to `handler` as they are read."""
    conn._parser.set_invalidation_push_handler(handler)


def unread(conn: aioredis.Connection) -> bool:
    """Whether the connection has received bytes nobody has read yet (an invalidation, maybe), or is gone."""
    reader, writer = conn._reader, conn._writer
    return reader is None or writer is None or bool(len(reader._buffer)) or reader.at_eof()


def fileno(conn: aioredis.Connection) -> int:
    """The connection's socket (to poll it for bytes the loop has not read yet)."""
    return conn._writer.get_extra_info("socket").fileno()


# What store/_redis_cluster.py needs of a cluster client.
def fast_cluster(client: Any) -> None:
    """A cluster client's connections made with this module's connection class (TCP or TLS): redis-py's cluster
    client takes none, it picks its own. Its connection options are shared with its map of the nodes, so every
    node it finds later gets it too; the nodes it starts from were made already."""
    kwargs = client.connection_kwargs
    kwargs["connection_class"] = fast_connection_class(kwargs["connection_class"])
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = kwargs["connection_class"]

class KeptCommands(AsyncCommandsParser):
    """The cluster client's table of Redis's commands (where each command's keys are), read with COMMAND from
    the cluster's first primary each time the client refreshes its map of the slots. When that primary is the
    one that just died, the refresh fails, and with it every command of the client, whichever node it is for,
    until a replica is elected in its place. A Redis's commands do not change with the cluster's shape: once
    read, the table is kept (the client's `commands_parser`)."""

    async def initialize(self, node: Any = None) -> None:
        if node is not None:
            self.node = node
        if not self.commands:
            await super().initialize()
