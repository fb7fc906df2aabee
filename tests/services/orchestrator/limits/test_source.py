"""The limits file: its fields over the defaults, errors naming the field, a reload on change that keeps the limits
in force when the new file is bad, and a replica that will not start on a bad file."""

from __future__ import annotations

import os

import pytest

from services.orchestrator.limits import LimitsFileError, LimitsSource, parse
from services.orchestrator.limits.policy import Limits
from tests.support.orchestrator import orchestrator_config


def test_a_tenant_entry_lies_over_the_defaults_field_by_field():
    table = parse({"defaults": {"concurrent_runs": 10, "held_streams": 50, "weight": 3},
                   "tenants": {"acme": {"concurrent_runs": 2, "held_streams": None, "priority": 1}}})
    assert table.tenant("acme") == Limits(concurrent_runs=2)  # `null`: unlimited for this tenant
    assert table.tenant("other") == Limits(concurrent_runs=10, held_streams=50)
    assert (table.share("acme").weight, table.share("acme").priority) == (3, 1)
    assert parse(None).any_limits is False and parse(None).tenant("x") == Limits()  # no file: unlimited


@pytest.mark.parametrize(("data", "named"), [
    ({"tenants": {"acme": {"concurrent_runs": "many"}}}, "tenants.acme.concurrent_runs: Input should be a valid integer"),
    ({"tenants": {"acme": {"runs_per_second": 0}}}, "tenants.acme.runs_per_second: Input should be greater than 0"),
    ({"defaults": {"concurent_runs": 1}}, "defaults.concurent_runs: Extra inputs are not permitted"),
    ({"tenants": {"a:b": {}}}, "tenants.a:b.[key]: String should match pattern"),
    ({"capacity": {"max_wait_s": 1}}, "capacity.runs: Field required"),
])
def test_a_bad_field_is_named(data, named):
    with pytest.raises(LimitsFileError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse(data)


def test_a_changed_file_is_read_again_and_a_bad_one_keeps_the_limits_in_force(tmp_path, caplog):
    path = tmp_path / "limits.yaml"
    path.write_text("tenants: {acme: {concurrent_runs: 1}}")
    seen = []
    source = LimitsSource(str(path), on_change=seen.append)
    assert not source.check()  # unchanged
    path.write_text("tenants: {acme: {concurrent_runs: 2}}\n")
    assert source.check() and source.table.tenant("acme").concurrent_runs == 2 and seen == [source.table]
    path.write_text("tenants: {acme: {concurrent_runs: [}\n")
    assert not source.check()
    assert "not YAML" in caplog.text and source.table.tenant("acme").concurrent_runs == 2
    path.write_text("tenants: {acme: {concurrent_runs: -3}}\n")
    assert not source.check() and not source.check()  # logged once, until it changes again
    assert caplog.text.count("tenants.acme.concurrent_runs") == 1
    os.remove(path)
    assert not source.check() and "is gone" in caplog.text and source.table.tenant("acme").concurrent_runs == 2


async def test_a_replica_does_not_start_on_a_bad_file(tmp_path, redis_server):
    from services.orchestrator.app import build

    path = tmp_path / "limits.yaml"
    path.write_text("tenants: {acme: {held_streams: lots}}")
    with pytest.raises(SystemExit, match="configuration error: limits file .*tenants.acme.held_streams"):
        build(orchestrator_config(redis_server.url, limits_file=str(path)))
    with pytest.raises(SystemExit, match="cannot read it"):
        build(orchestrator_config(redis_server.url, limits_file=str(tmp_path / "missing.yaml")))
