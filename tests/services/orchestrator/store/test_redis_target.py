"""TRELLIS_REDIS_URL read into what to connect to (store/redis_target.py): each kind of Redis, its options, and a
line naming what is wrong with a URL that is not one of them."""

from __future__ import annotations

import pytest

from services.orchestrator.store.redis_target import CLUSTER, SENTINEL, SINGLE, TlsFiles, parse


def test_one_redis_plain_tls_and_unix_socket():
    assert parse("redis://127.0.0.1:6379/0").kind == SINGLE
    tls = parse("rediss://:secret@redis.example.com:6380/2")
    assert tls.kind == SINGLE and tls.tls and tls.shown == "rediss://:***@redis.example.com:6380/2"
    assert parse("unix:///run/redis.sock?db=1").kind == SINGLE


def test_a_cluster_with_its_nodes_credentials_and_options():
    target = parse("redis+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002,node-3?socket_timeout=2.5")
    assert target.kind == CLUSTER and not target.tls
    assert target.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002), ("node-3", 6379))
    assert target.options == {"username": "app", "password": "pw", "socket_timeout": 2.5}
    assert "pw" not in target.shown
    assert parse("rediss+cluster://h:7000").options == {"ssl": True}


def test_sentinels_the_primary_s_name_and_the_sentinels_own_password():
    target = parse("redis+sentinel://:pw@s1,s2:26380/mymaster/3?sentinel_password=spw")
    assert target.kind == SENTINEL and target.service == "mymaster"
    assert target.nodes == (("s1", 26379), ("s2", 26380))
    assert target.options == {"password": "pw", "db": 3}  # the data nodes'
    assert target.sentinel_options == {"password": "spw"}  # the Sentinels'
    over_tls = parse("rediss+sentinel://s1/mymaster")
    assert over_tls.options == {"db": 0, "ssl": True} and over_tls.sentinel_options == {"ssl": True}


def test_tls_files_go_with_a_tls_url(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert parse("rediss://h", TlsFiles(ca=str(ca))).options == {"ssl_ca_certs": str(ca)}
    assert parse("rediss+cluster://h:1", TlsFiles(ca=str(ca))).options == {"ssl": True, "ssl_ca_certs": str(ca)}


@pytest.mark.parametrize("url, tls, says", [
    ("http://h:1", TlsFiles(), "the scheme must be one of redis://, rediss://"),
    ("redis+cluster://h:1/3", TlsFiles(), "a Redis Cluster has one database; drop '/3'"),
    ("redis+cluster://h:port", TlsFiles(), "'h:port' is not host:port"),
    ("redis+cluster://h:99999", TlsFiles(), "port 99999 is out of range"),
    ("redis+sentinel://s1:26379", TlsFiles(), "name the primary the Sentinels monitor"),
    ("redis+cluster://h:1?socket_timeout=soon", TlsFiles(), "Invalid value for 'socket_timeout'"),
    ("redis://h", TlsFiles(ca="/etc/ca.pem"), "is not a TLS URL"),
    ("rediss://h", TlsFiles(ca="/nowhere/ca.pem"), "TRELLIS_REDIS_TLS_CA='/nowhere/ca.pem': no such file"),
    ("rediss://h", TlsFiles(cert="/etc/hostname"), "TRELLIS_REDIS_TLS_CERT and TRELLIS_REDIS_TLS_KEY go together"),
])
def test_a_url_that_is_not_one_of_them_is_refused_naming_the_problem(url, tls, says):
    with pytest.raises(ValueError, match="TRELLIS_REDIS") as refused:
        parse(url, tls)
    assert says in str(refused.value)


def test_the_password_never_shows_in_a_refusal():
    with pytest.raises(ValueError) as refused:
        parse("redis+cluster://app:hunter2@h:1/3")
    assert "hunter2" not in str(refused.value) and "app:***@" in str(refused.value)
