"""The orchestrator on a Redis that speaks TLS only (tests/support/redis_tls.py: Debian's redis-server, a CA made
here), as TRELLIS_REDIS_URL=rediss://... with TRELLIS_REDIS_TLS_CA names it, and on a Redis Cluster over TLS
(rediss+cluster://): runs, transactions, the agent cache's
tracking connection and the limits windows all over TLS; mutual TLS with TRELLIS_REDIS_TLS_CERT and _KEY; and the
clear refusals: a server certificate no trusted CA signed, a client certificate missing, TLS files beside a URL
that is not TLS."""

from __future__ import annotations

import json

import grpc
import pytest
from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.common.errors import Unavailable
from services.orchestrator.config import OrchestratorConfig
from services.orchestrator.store import AgentStore, SessionStore
from services.orchestrator.store.redis_client import connect, limits_storage, wait_until_ready
from services.orchestrator.store.redis_target import TlsFiles, parse
from services.orchestrator.store.sessions import message
from tests.support.orchestrator import orchestrator
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_tls import TlsRedisServer, make_certificates

ECHO = json.dumps({"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": ["Message:Out"], "upstream": []},
    "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["echo: {sys.query}"]}},
                    "downstream": [], "upstream": ["begin"]},
}})


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory):
    server = TlsRedisServer(tmp_path_factory.mktemp("redis-tls"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mutual_tls_redis(tmp_path_factory):
    server = TlsRedisServer(tmp_path_factory.mktemp("redis-mtls"), require_client_cert=True)
    server.start()
    yield server
    server.stop()


async def test_runs_through_an_orchestrator_on_a_tls_redis(tls_redis):
    tls = TlsFiles(ca=str(tls_redis.files.ca))
    async with orchestrator(tls_redis.url, redis_tls=tls) as orch, grpc.aio.insecure_channel(orch.addr) as channel:
        stub = canvas_grpc.CanvasServiceStub(channel)
        events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=ECHO, query="over TLS"),
                                            timeout=30)]
        assert events[-1].WhichOneof("kind") == "run_finished" and events[-1].run_finished.error == ""
        assert "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta") \
            == "echo: over TLS"
        stored = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=events[0].run_id),
                                                 timeout=30)]
        assert [e.seq for e in stored] == [e.seq for e in events]


async def test_transactions_the_agent_cache_and_the_limits_windows_over_tls(tls_redis):
    target = parse(tls_redis.url, TlsFiles(ca=str(tls_redis.files.ca)))
    client = connect(target)
    agents = AgentStore(client)
    try:
        await agents.resolved_cache.start()
        assert agents.resolved_cache.tracking  # its own connection, over TLS too
        a = await agents.create("t1", title="tls", dsl_json='{"v": 1}')
        assert (await agents.resolve_dsl("t1", a.id, draft=True))[0] == '{"v": 1}'
        await agents.update("t1", a.id, dsl_json='{"v": 2}')  # WATCH, MULTI/EXEC
        assert (await agents.resolve_dsl("t1", a.id, draft=True))[0] == '{"v": 2}'
        sessions = SessionStore(client, 3600)
        created = await sessions.create("t1", agent_id=a.id, messages=[message("assistant", "Hi!")])
        assert [m["content"] for m in (await sessions.get("t1", created.id)).messages] == ["Hi!"]
        limiter = MovingWindowRateLimiter(limits_storage(target, "trellis:test_limits"))
        item = RateLimitItemPerSecond(1, 60)
        assert [await limiter.hit(item, a.id) for _ in range(2)] == [True, False]
    finally:
        await agents.resolved_cache.aclose()
        await client.aclose()


async def test_a_server_certificate_no_trusted_ca_signed_is_refused_naming_it(tls_redis):
    client = connect(parse(tls_redis.url))  # the system's CAs: they did not sign the test CA
    try:
        with pytest.raises(Unavailable, match="certificate verify failed"):
            await wait_until_ready(client, tls_redis.url, timeout_s=2)
    finally:
        await client.aclose()


async def test_mutual_tls_with_the_client_certificate_and_refused_without(mutual_tls_redis):
    files = mutual_tls_redis.files
    client = connect(parse(mutual_tls_redis.url, TlsFiles(ca=str(files.ca), cert=str(files.client_cert),
                                                          key=str(files.client_key))))
    try:
        await client.set("mtls", "yes")
        assert await client.get("mtls") == b"yes"
    finally:
        await client.aclose()
    client = connect(parse(mutual_tls_redis.url, TlsFiles(ca=str(files.ca))))
    try:
        with pytest.raises(Unavailable, match=f"Redis at {mutual_tls_redis.url} is not reachable"):
            await wait_until_ready(client, mutual_tls_redis.url, timeout_s=2)
    finally:
        await client.aclose()


def test_the_tls_files_come_from_the_environment_and_a_bad_setting_stops_start_up(tls_redis, monkeypatch):
    monkeypatch.setenv("TRELLIS_REDIS_URL", tls_redis.url)
    monkeypatch.setenv("TRELLIS_REDIS_TLS_CA", str(tls_redis.files.ca))
    target = OrchestratorConfig.from_env().redis
    assert target.tls and target.options == {"ssl_ca_certs": str(tls_redis.files.ca)}
    monkeypatch.setenv("TRELLIS_REDIS_URL", tls_redis.url.replace("rediss://", "redis://"))
    with pytest.raises(SystemExit, match="TRELLIS_REDIS_TLS_\\* name TLS files but TRELLIS_REDIS_URL="):
        OrchestratorConfig.from_env()
    monkeypatch.setenv("TRELLIS_REDIS_URL", tls_redis.url)
    monkeypatch.setenv("TRELLIS_REDIS_TLS_CERT", str(tls_redis.files.client_cert))
    with pytest.raises(SystemExit, match="TRELLIS_REDIS_TLS_CERT and TRELLIS_REDIS_TLS_KEY go together"):
        OrchestratorConfig.from_env()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("redis-tls-cluster")
    cluster = RedisClusterServers(root, replicas_each=0, tls=make_certificates(root))
    cluster.start()
    yield cluster
    cluster.stop()


async def test_runs_and_the_agent_cache_on_a_redis_cluster_over_tls(tls_cluster):
    tls = TlsFiles(ca=str(tls_cluster.tls.ca))
    async with orchestrator(tls_cluster.url, redis_tls=tls) as orch, grpc.aio.insecure_channel(orch.addr) as channel:
        stub = canvas_grpc.CanvasServiceStub(channel)
        events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=ECHO, query="cluster"),
                                            timeout=30)]
        assert events[-1].run_finished.error == ""
        stored = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=events[0].run_id),
                                                 timeout=30)]
        assert [e.seq for e in stored] == [e.seq for e in events]
    client = connect(parse(tls_cluster.url, tls))
    agents = AgentStore(client)
    try:
        await agents.resolved_cache.start()
        assert agents.resolved_cache.tracking and len(agents.resolved_cache.connections) == len(tls_cluster.nodes)
        a = await agents.create("t1", title="tls cluster", dsl_json='{"v": 1}')
        await agents.update("t1", a.id, dsl_json='{"v": 2}')  # MULTI/EXEC on its primary, over TLS
        assert (await agents.resolve_dsl("t1", a.id, draft=True))[0] == '{"v": 2}'
        limiter = MovingWindowRateLimiter(limits_storage(parse(tls_cluster.url, tls), "trellis:test_limits"))
        assert await limiter.hit(RateLimitItemPerSecond(1, 60), a.id)
    finally:
        await agents.resolved_cache.aclose()
        await client.aclose()
