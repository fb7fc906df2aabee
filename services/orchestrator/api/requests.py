"""What every request of the orchestrator's API must carry."""

from __future__ import annotations

from services.common.errors import InvalidArgument


def tenant_of(request) -> str:
    """The request's tenant: every call is scoped to one, and none may leave it empty."""
    if not request.tenant_id:
        raise InvalidArgument("tenant_id is required")
    return request.tenant_id
