"""Which Redis the orchestrator uses and how it reaches it: `TRELLIS_REDIS_URL`, and for TLS the files named by
`TRELLIS_REDIS_TLS_CA`, `TRELLIS_REDIS_TLS_CERT` and `TRELLIS_REDIS_TLS_KEY` (docs/redis.md).

    redis://[user:password@]host[:port][/db]                        one Redis
    rediss://[user:password@]host[:port][/db]                       one Redis over TLS
    unix:///path/to/redis.sock[?db=N]                               one Redis on a unix socket
    redis+cluster://[user:password@]host:port[,host:port...]        a Redis Cluster (any of its nodes: the
                                                                    client finds the rest, and follows changes)
    redis+sentinel://[user:password@]host:port[,host:port...]/name[/db]
                                                                    the primary that these Sentinels call `name`
    rediss+cluster://..., rediss+sentinel://...                     the same over TLS (to the Sentinels too)

The user and password are the data nodes'. Query options are redis-py's connection options
(`?socket_timeout=5`); a Sentinel URL also takes `sentinel_username` and `sentinel_password`, for Sentinels that
require their own (without them the Sentinels are asked without credentials). A URL that is not one of these
stops start-up with a line saying what is wrong (`parse` raises ValueError)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from redis.asyncio.connection import parse_url

SINGLE, CLUSTER, SENTINEL = "single", "cluster", "sentinel"
_SCHEMES = {"redis": (SINGLE, False), "rediss": (SINGLE, True), "unix": (SINGLE, False),
            "redis+cluster": (CLUSTER, False), "rediss+cluster": (CLUSTER, True),
            "redis+sentinel": (SENTINEL, False), "rediss+sentinel": (SENTINEL, True)}
_DEFAULT_PORT = {CLUSTER: 6379, SENTINEL: 26379}
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\[\]:,/]+)(?::(\d{1,5}))?")


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files TLS uses: the CA to trust (else the system's), and a client certificate with its key when
    Redis asks for one (mutual TLS)."""

    ca: str = ""  # TRELLIS_REDIS_TLS_CA
    cert: str = ""  # TRELLIS_REDIS_TLS_CERT
    key: str = ""  # TRELLIS_REDIS_TLS_KEY

    def __bool__(self) -> bool:
        return bool(self.ca or self.cert or self.key)

    def options(self) -> dict[str, Any]:
        """redis-py's connection options for these files."""
        return {k: v for k, v in (("ssl_ca_certs", self.ca), ("ssl_certfile", self.cert),
                                  ("ssl_keyfile", self.key)) if v}


@dataclass(frozen=True)
class RedisTarget:
    kind: str  # SINGLE, CLUSTER or SENTINEL
    url: str  # as given
    tls: bool = False
    nodes: tuple[tuple[str, int], ...] = ()  # CLUSTER: nodes to start from; SENTINEL: the Sentinels
    service: str = ""  # SENTINEL: the name the Sentinels know the primary by
    options: dict[str, Any] = field(default_factory=dict)  # redis-py's connection options (credentials, TLS...)
    sentinel_options: dict[str, Any] = field(default_factory=dict)  # SENTINEL: how to reach the Sentinels

    @property
    def shown(self) -> str:
        """The URL without its password, for messages and logs."""
        return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", self.url)


def parse(url: str, tls: TlsFiles = TlsFiles()) -> RedisTarget:
    """What `url` (and the TLS files) say to connect to; ValueError naming the problem otherwise."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: the scheme must be one of "
                         f"{', '.join(s + '://' for s in _SCHEMES)}")
    kind, secure = _SCHEMES[scheme]
    if tls and not secure:
        raise ValueError(f"TRELLIS_REDIS_TLS_* name TLS files but TRELLIS_REDIS_URL={_hidden(url)!r} is not a TLS "
                         "URL (rediss://, rediss+cluster://, rediss+sentinel://)")
    _check_files(tls)
    tls_options = {"ssl": True, **tls.options()} if secure else {}
    if kind == SINGLE:
        try:
            parse_url(url)  # what redis-py itself will read from it: its own errors, said now
        except ValueError as exc:
            raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: {exc}") from None
        return RedisTarget(SINGLE, url, tls=secure, options=tls.options() if secure else {})
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = tuple(_node(h, url, _DEFAULT_PORT[kind]) for h in hosts.split(","))
    query = dict(parse_qsl(parts.query))
    sentinel_auth = {k.removeprefix("sentinel_"): query.pop(k) for k in ("sentinel_username", "sentinel_password")
                     if k in query}
    path = [unquote(p) for p in parts.path.split("/") if p]
    db = "0"
    if kind == CLUSTER and path:
        raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: a Redis Cluster has one database; drop {parts.path!r}")
    if kind == SENTINEL:
        if not path or len(path) > 2:
            raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: name the primary the Sentinels monitor, "
                             "redis+sentinel://host:port,host:port/<name>[/<db>]")
        db = path[1] if len(path) == 2 else "0"
    try:  # the options as redis-py reads them from a URL (typed: socket_timeout=5 is a number)
        options = parse_url(f"redis://{userinfo + '@' if userinfo else ''}h/{db}"
                            f"{'?' + urlencode(query) if query else ''}")
    except ValueError as exc:
        raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: {exc}") from None
    options.pop("host", None)
    if kind == CLUSTER:
        options.pop("db", None)
        return RedisTarget(CLUSTER, url, tls=secure, nodes=nodes, options={**options, **tls_options})
    return RedisTarget(SENTINEL, url, tls=secure, nodes=nodes, service=path[0], options={**options, **tls_options},
                       sentinel_options={**sentinel_auth, **tls_options})


def _node(text: str, url: str, default_port: int) -> tuple[str, int]:
    found = _HOST.fullmatch(text.strip())
    if not found:
        raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: {text!r} is not host:port")
    port = int(found.group(2) or default_port)
    if not 0 < port < 65536:
        raise ValueError(f"TRELLIS_REDIS_URL={_hidden(url)!r}: port {port} is out of range")
    return found.group(1).strip("[]"), port


def _check_files(tls: TlsFiles) -> None:
    if bool(tls.cert) != bool(tls.key):
        raise ValueError("TRELLIS_REDIS_TLS_CERT and TRELLIS_REDIS_TLS_KEY go together: a client certificate "
                         "needs its key")
    for variable, path in (("TRELLIS_REDIS_TLS_CA", tls.ca), ("TRELLIS_REDIS_TLS_CERT", tls.cert),
                           ("TRELLIS_REDIS_TLS_KEY", tls.key)):
        if path and not os.access(path, os.R_OK):
            raise ValueError(f"{variable}={path!r}: no such file, or not readable")


def _hidden(url: str) -> str:
    return RedisTarget(SINGLE, url).shown
