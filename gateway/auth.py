"""API keys -> tenants. Every request names its tenant only through its key (docs/ARCHITECTURE.md, "Tenants and egress").

    keys = KeyRing(load_keys(cfg))
    tenant = keys.tenant_for(request.headers.get("Authorization"))   # None: refuse the request

`ensure_api_key_file(path)` is also what `trellis up` calls to print the local key.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from pathlib import Path
from typing import Mapping

from gateway.config import GatewayConfig

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"


def _new_key() -> str:
    return "trellis-" + secrets.token_hex(24)


def ensure_api_key_file(path: str | Path) -> str:
    """The key stored in `path`, created (mode 0600, one random key) when the file does not exist.

    O_EXCL makes creation race-free: when `trellis up` and the gateway start together, one writes and
    both read the same key.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(_new_key() + "\n")
    keys = read_key_file(path)
    if not keys:
        raise SystemExit(f"configuration error: {path} holds no API key (delete it to get a new one)")
    return next(iter(keys))


def read_key_file(path: str | Path) -> dict[str, str]:
    """One key per line, `key` (tenant "default") or `key:tenant`; blank lines and `#` comments skipped."""
    keys: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, tenant = line.rpartition(":")
        keys[key.strip() if sep else line] = tenant.strip() if sep else DEFAULT_TENANT
    return keys


def load_keys(cfg: GatewayConfig) -> dict[str, str]:
    """TRELLIS_API_KEYS when set, else the key file (created on first start). Logs where the key is, once."""
    if cfg.api_keys:
        return dict(cfg.api_keys)
    if not cfg.api_key_file:
        log.warning("no API keys configured: every request will be refused")
        return {}
    ensure_api_key_file(cfg.api_key_file)
    keys = read_key_file(cfg.api_key_file)
    log.info("API key for tenant %r is in %s", DEFAULT_TENANT, cfg.api_key_file)
    return keys


def bearer_token(header: str | None) -> str:
    """`Bearer <key>` or the bare key, as RAGFlow accepts both."""
    value = (header or "").strip()
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == "bearer":
        return rest.strip()
    return value


def api_key_id(authorization: str | None) -> str:
    """The id the limits name a key by (docs/limits.md): the first 16 hex digits of its SHA-256, never the key;
    "" without one. The gateway sets it on each run it starts (RunRequest.api_key_id)."""
    token = bearer_token(authorization)
    return hashlib.sha256(token.encode()).hexdigest()[:16] if token else ""


class KeyRing:
    """Looks keys up by their SHA-256, so a lookup's timing says nothing about how much of a key matched."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        self._tenants = {self._digest(k): t for k, t in keys.items()}

    @staticmethod
    def _digest(key: str) -> bytes:
        return hashlib.sha256(key.encode()).digest()

    def tenant_for(self, authorization: str | None) -> str | None:
        token = bearer_token(authorization)
        if not token:
            return None
        return self._tenants.get(self._digest(token))

    def tenants(self) -> set[str]:
        """Every tenant a key maps to: where an anonymous RAGFlow webhook looks for its agent."""
        return set(self._tenants.values())

    def __len__(self) -> int:
        return len(self._tenants)
