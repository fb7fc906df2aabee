"""RAGFlow's webhook trigger, checked as RAGFlow's `agent_api.py` checks it (gateway/routes/webhooks.py serves it):

- `security.py`: body size, IP allow-list, rate limit, then none / token / basic / JWT auth;
- `schema.py`: the query, headers and body a Begin in Webhook mode declares, extracted and cast;
- `payload.py`: the request read into {"query", "headers", "body", "content_type"}.

Every refusal is a `WebhookRefused` carrying RAGFlow's message; the route answers it as RAGFlow does
(`{"code": 400, "message": ...}`, HTTP 400).
"""

from __future__ import annotations


class WebhookRefused(Exception):
    """A request RAGFlow's webhook refuses; `str()` is its message."""


__all__ = ["WebhookRefused"]
