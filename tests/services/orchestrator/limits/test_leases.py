"""The limits' Redis side and one replica's gate, on a real Redis: slot leases of several replicas never sum past a
limit and a dead replica's expire; a replica admits from what it leased without a round trip; runs started per
second and LLM tokens per minute are leased in chunks and refuse with the time to wait; every key of a tenant is
in one Cluster slot (a Redis in cluster mode refuses a script across slots)."""

from __future__ import annotations

import uuid

import pytest

from services.orchestrator.limits import LimitExceeded, LimitsSource, TenantGate, parse
from services.orchestrator.limits.policy import Scope
from services.orchestrator.store.limits import LimitStore, SlotWant
from services.orchestrator.store.redis_client import connect
from tests.support.redis_round_trips import count_round_trips
from tests.support.redis_server import RedisServer
from tests.support.waiting import eventually


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def gate_with(redis_client, url: str, limits: dict, *, owner: str = "replica-a", ttl_s: float = 30.0) -> TenantGate:
    source = LimitsSource()
    source.table = parse(limits)
    return TenantGate(source, LimitStore(redis_client, url, owner=owner, lease_ttl_s=ttl_s))


async def test_replicas_leases_never_sum_past_the_limit_and_a_dead_ones_expire(redis_client, redis_server, tenant):
    a = LimitStore(redis_client, redis_server.url, owner="a", lease_ttl_s=0.5)
    b = LimitStore(redis_client, redis_server.url, owner="b", lease_ttl_s=30)
    assert await a.lease(tenant, "runs", [SlotWant("tenant", 0, 4, 5)]) == [4]
    assert await b.lease(tenant, "runs", [SlotWant("tenant", 0, 4, 5)]) == [1]  # what the limit leaves
    assert await b.lease(tenant, "runs", [SlotWant("tenant", 0, 2, 5)]) == [1]
    # A replica never holds less than it uses, even past what the others leave (a run taken over).
    assert await b.lease(tenant, "runs", [SlotWant("tenant", 3, 3, 5)]) == [3]
    assert await b.lease(tenant, "runs", [SlotWant("tenant", 1, 1, 5)]) == [1]
    assert await a.leases(tenant, "runs", "tenant") == {"a": 4, "b": 1}
    # `a` stops renewing (it died): once its lease expires, `b` may lease every slot.
    assert await eventually(_held(b, tenant, 5), what="a dead replica's lease expiring") == [5]
    assert await b.leases(tenant, "runs", "tenant") == {"b": 5}


def _held(store: LimitStore, tenant: str, want: int):
    async def check():
        held = await store.lease(tenant, "runs", [SlotWant("tenant", 0, want, want)])
        return held if held == [want] else None
    return check


async def test_a_replica_admits_from_its_lease_without_a_round_trip(redis_client, redis_server, tenant, monkeypatch):
    gate = gate_with(redis_client, redis_server.url, {"tenants": {tenant: {"concurrent_runs": 100}}})
    await gate.store.lease(f"{tenant}-warm", "runs", [SlotWant("tenant", 0, 0, 1)])  # connected, script loaded
    sent = count_round_trips(monkeypatch)
    first = await gate.admit_run(tenant, "r0")
    assert len(sent) == 1  # the first run leases (itself and a tenth of the limit of headroom)
    sent.clear()
    tickets = [await gate.admit_run(tenant, f"r{i}") for i in range(1, 11)]
    assert len(sent) == 0  # ...and the next ten are admitted from it
    for ticket in [first, *tickets]:
        ticket.release()
    assert gate.runs.used(tenant) == 0
    await gate.reconcile()  # gives back what it does not use
    assert await gate.store.leases(tenant, "runs", "tenant") == {}


async def test_the_tightest_scope_refuses_naming_it_and_another_tenant_is_admitted(redis_client, redis_server,
                                                                                   tenant):
    gate = gate_with(redis_client, redis_server.url, {"tenants": {tenant: {
        "concurrent_runs": 3, "agents": {"bot": {"concurrent_runs": 1}}}}})
    held = await gate.admit_run(tenant, "r1", agent_id="bot")
    with pytest.raises(LimitExceeded, match=f"tenant '{tenant}' agent 'bot' is at its limit of 1 concurrent runs"):
        await gate.admit_run(tenant, "r2", agent_id="bot")
    other = await gate.admit_run(tenant, "r3", agent_id="other")  # the tenant has room for another agent
    third = await gate.admit_run(f"{tenant}-b", "r4")  # unlimited tenant
    with pytest.raises(LimitExceeded, match=f"tenant '{tenant}' is at its limit of 3 concurrent runs") as refused:
        await gate.admit_run(tenant, "r5")
        await gate.admit_run(tenant, "r6")
    assert refused.value.limit == "concurrent_runs" and refused.value.retry_after_s > 0
    trailers = dict(refused.value.trailing_metadata)
    assert trailers["ratelimit-policy"] == '"concurrent_runs";q=3;qu="concurrent-requests"'
    assert trailers["ratelimit"].startswith('"concurrent_runs";r=0;t=')
    for ticket in (held, other, third):
        ticket.release()


async def test_runs_per_second_refuse_with_the_wait_and_leave_other_tenants_alone(redis_client, redis_server,
                                                                                 tenant):
    # 2 per second with a burst of 4: a window of 4 runs in any 2 s.
    gate = gate_with(redis_client, redis_server.url, {"tenants": {tenant: {"runs_per_second": 2, "burst": 4}}})
    tickets = [await gate.admit_run(tenant, f"r{i}") for i in range(4)]
    with pytest.raises(LimitExceeded, match="at its limit of 2 runs per second") as refused:
        await gate.admit_run(tenant, "r4")
    assert 0 < refused.value.retry_after_s <= 2
    assert dict(refused.value.trailing_metadata)["ratelimit-policy"] == '"runs_per_second";q=4;w=2'
    tickets.append(await gate.admit_run(f"{tenant}-b", "other"))
    for ticket in tickets:
        ticket.release()


async def test_two_replicas_share_one_rate_window(redis_client, redis_server, tenant):
    # 20 in any 20 s: a window longer than the loop takes on a slow machine, so it does not slide meanwhile.
    limits = {"tenants": {tenant: {"runs_per_second": 1, "burst": 20}}}
    a = gate_with(redis_client, redis_server.url, limits, owner="a")
    b = gate_with(redis_client, redis_server.url, limits, owner="b")
    admitted = refused = 0
    for i in range(40):
        try:
            (await (a if i % 2 else b).admit_run(tenant, f"r{i}")).release()
            admitted += 1
        except LimitExceeded:
            refused += 1
    # Leased in chunks of 2 per replica, the next one only once the last is spent: at most a chunk per replica
    # left unspent when the window is full.
    assert 16 <= admitted <= 20 and refused == 40 - admitted


async def test_tokens_per_minute_refuse_new_runs_once_spent(redis_client, redis_server, tenant):
    gate = gate_with(redis_client, redis_server.url, {"tenants": {tenant: {"tokens_per_minute": 1000}}})
    ticket = await gate.admit_run(tenant, "r1")  # the first run leases inline
    gate.charge_tokens(tenant, "r1", 600)
    gate.charge_tokens(tenant, "r1", 600)  # past the minute's budget: the background lease fails

    async def refused() -> LimitExceeded | None:
        try:
            (await gate.admit_run(tenant, "r2")).release()
        except LimitExceeded as exc:
            return exc
        return None

    exc = await eventually(refused, what="a run refused for the tenant's tokens")
    assert "at its limit of 1000 LLM tokens per minute" in exc.message and exc.limit == "tokens_per_minute"
    assert ticket.tokens == 1200
    ticket.release()


async def test_every_key_of_a_tenant_is_in_one_cluster_slot(tmp_path, tenant):
    server = RedisServer(tmp_path, cluster=True)
    server.start()
    client = connect(server.url)
    try:
        gate = gate_with(client, server.url, {"tenants": {tenant: {
            "concurrent_runs": 5, "runs_per_second": 5, "tokens_per_minute": 100, "held_streams": 5,
            "agents": {"bot": {"concurrent_runs": 2, "runs_per_second": 1}},
            "api_keys": {"k1": {"concurrent_runs": 2}}}}})
        ticket = await gate.admit_run(tenant, "r1", agent_id="bot", api_key_id="k1")  # three scopes, one script
        stream = await gate.hold_stream(tenant)
        gate.charge_tokens(tenant, "r1", 500)
        await gate.reconcile()
        ticket.release()
        stream.release()
        assert await gate.store.leases(tenant, "runs", "agent.bot") == {"replica-a": 1}
    finally:
        await client.aclose()
        server.stop()


def test_scope_names_a_refusal(tenant):
    assert Scope(tenant).describe() == f"tenant {tenant!r}"
    assert Scope(tenant, "api_key", "k1").describe() == f"tenant {tenant!r} api key 'k1'"
