"""A webhook's `security` (Begin's params), checked in RAGFlow's order: a missing config refuses, then the
body size, the IP allow-list, the rate limit, and last the authentication (`auth_type`: none with
`allow_anonymous`, token, basic or jwt). Each refusal carries RAGFlow's message.

Where RAGFlow's code and safety part: a `token` config without `token_value` (or `basic_auth` without a
username) refuses every request instead of letting one through that sends no header.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from typing import Any, Awaitable, Callable

import jwt
from aiohttp import web

from gateway.webhooks import WebhookRefused

MAX_LIMIT = 10 * 1024 * 1024  # RAGFlow: no webhook takes a body over 10MB
_UNITS = {"kb": 1024, "mb": 1024**2}
_WINDOWS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_RESERVED_CLAIMS = {"exp", "sub", "aud", "iss", "nbf", "iat"}

# Takes one request from the agent's rate window (limit, window seconds); False when spent.
Take = Callable[[int, int], Awaitable[bool]]


async def check(cfg: Any, request: web.Request, take: Take) -> None:
    if not isinstance(cfg, dict) or not cfg:
        raise WebhookRefused("Webhook security is required. Set allow_anonymous to true to permit unauthenticated webhooks.")
    max_body_size(cfg, request.content_length or 0)
    ip_allowed(cfg, request.remote or "")
    await rate_limit(cfg, take)
    authenticate(cfg, request.headers)


def max_body_size(cfg: dict[str, Any], content_length: int) -> None:
    size = str(cfg.get("max_body_size") or "10MB").lower()
    for suffix, factor in _UNITS.items():
        if size.endswith(suffix):
            limit = int(size.replace(suffix, "")) * factor  # a ValueError's text is RAGFlow's message too
            break
    else:
        raise WebhookRefused("Invalid max_body_size format")
    if limit > MAX_LIMIT:
        raise WebhookRefused("max_body_size exceeds maximum allowed size (10MB)")
    if content_length > limit:
        raise WebhookRefused(f"Request body too large: {content_length} > {limit}")


def ip_allowed(cfg: dict[str, Any], client_ip: str) -> None:
    rules = cfg.get("ip_whitelist") or []
    if not rules:
        return
    for rule in rules:
        rule = str(rule)
        if "/" in rule:
            if ipaddress.ip_address(client_ip) in ipaddress.ip_network(rule, strict=False):
                return
        elif client_ip == rule:
            return
    raise WebhookRefused(f"IP {client_ip} is not allowed by whitelist")


async def rate_limit(cfg: dict[str, Any], take: Take) -> None:
    rl = cfg.get("rate_limit") or {"limit": 60, "per": "minute"}
    limit = int(rl.get("limit", 60))
    if limit <= 0:
        raise WebhookRefused("rate_limit.limit must be > 0")
    per = rl.get("per", "minute")
    window = _WINDOWS.get(per)
    if not window:
        raise WebhookRefused(f"Invalid rate_limit.per: {per}")
    try:
        allowed = await take(limit, window)
    except Exception as exc:  # RAGFlow: a failing store refuses too, naming why
        raise WebhookRefused(f"Rate limit error: {exc}") from None
    if not allowed:
        raise WebhookRefused("Rate limit error: Too many requests (rate limit exceeded)")


def authenticate(cfg: dict[str, Any], headers: Any) -> None:
    auth_type = cfg.get("auth_type", "none")
    if auth_type == "none":
        if not _truthy(cfg.get("allow_anonymous")):
            raise WebhookRefused("Anonymous webhook access requires allow_anonymous to be true")
    elif auth_type == "token":
        token = cfg.get("token") or {}
        header, expected = token.get("token_header"), token.get("token_value")
        if not header or expected is None or headers.get(str(header)) != expected:
            raise WebhookRefused("Invalid token authentication")
    elif auth_type == "basic":
        basic = cfg.get("basic_auth") or {}
        given = _basic(headers.get("Authorization", ""))
        if given is None or basic.get("username") is None or given != (basic.get("username"), basic.get("password")):
            raise WebhookRefused("Invalid Basic Auth credentials")
    elif auth_type == "jwt":
        verify_jwt(cfg.get("jwt") or {}, headers.get("Authorization", ""))
    else:
        raise WebhookRefused(f"Unsupported auth_type: {auth_type}")


def verify_jwt(cfg: dict[str, Any], authorization: str) -> dict[str, Any]:
    secret = cfg.get("secret")
    if not secret:
        raise WebhookRefused("JWT secret not configured")
    if not authorization.startswith("Bearer "):
        raise WebhookRefused("Missing Bearer token")
    token = authorization[len("Bearer "):].strip()
    if not token:
        raise WebhookRefused("Empty Bearer token")
    alg = (cfg.get("algorithm") or "HS256").upper()
    kwargs: dict[str, Any] = {"key": secret, "algorithms": [alg]}
    options = {"verify_aud": bool(cfg.get("audience")), "verify_iss": bool(cfg.get("issuer"))}
    if cfg.get("audience"):
        kwargs["audience"] = cfg["audience"]
    if cfg.get("issuer"):
        kwargs["issuer"] = cfg["issuer"]
    try:
        decoded = jwt.decode(token, options=options, **kwargs)
    except Exception as exc:  # PyJWT's errors, and a bad key or algorithm, all as RAGFlow words them
        raise WebhookRefused(f"Invalid JWT: {exc}") from None
    raw = cfg.get("required_claims", [])
    claims = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, (list, tuple, set)) else []
    claims = [c for c in claims if isinstance(c, str) and c.strip()]
    for claim in claims:
        if claim in _RESERVED_CLAIMS:
            raise WebhookRefused(f"Reserved JWT claim cannot be required: {claim}")
    for claim in claims:
        if claim not in decoded:
            raise WebhookRefused(f"Missing JWT claim: {claim}")
    return decoded


def _basic(header: str) -> tuple[str, str] | None:
    """(username, password) of a Basic Authorization header, or None (werkzeug's `request.authorization`)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, ValueError):
        return None
    return (user, password) if sep else None


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return False
