"""Begin: the entry point (id "begin"). Publishes the run's inputs as its outputs (`{begin@k}`)."""
from __future__ import annotations

import json
import logging
from typing import Any

from .base import Component, NodeContext, ValidationIssue, register

log = logging.getLogger(__name__)

MODES = ("conversational", "task", "Webhook", "webhook")


@register
class Begin(Component):
    component_name = "Begin"

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        issues = []
        mode = params.get("mode")
        if mode is not None and mode not in MODES:
            issues.append(ValidationIssue(cpn_id, "params.mode", f"must be one of {', '.join(MODES[:3])}"))
        inputs = params.get("inputs")
        if inputs is not None and not isinstance(inputs, dict):
            issues.append(ValidationIssue(cpn_id, "params.inputs", "must be an object {key: field}"))
        return issues

    async def run(self, ctx: NodeContext) -> None:
        declared = self.params.get("inputs") or {}
        if not isinstance(declared, dict):
            declared = {}
        req = ctx.request
        given: dict[str, Any] = dict(req.inputs) if req is not None else {}
        if str(self.params.get("mode", "")).lower() == "webhook" and req and req.webhook_payload:
            payload = dict(req.webhook_payload)
            given.setdefault("request", payload.pop("input", None))
            for k, v in payload.items():
                ctx.set_output(k, v)
        if not given and declared:
            given = self._from_query(ctx.get_global("sys.query"), declared)
        # Declared fields first (their default value when not given), then any extra key sent.
        for key, spec in declared.items():
            value = _value_of(given[key], spec) if key in given else _default(spec)
            ctx.set_output(key, value)
            ctx.set_input(key, value)
        for key, raw in given.items():
            if key not in declared:
                value = _value_of(raw, {})
                ctx.set_output(key, value)
                ctx.set_input(key, value)

    @staticmethod
    def _from_query(query: Any, declared: dict[str, Any]) -> dict[str, Any]:
        """RAGFlow: with no inputs, a single field takes the query; a dict query maps onto fields."""
        if isinstance(query, dict):
            return {k: v for k, v in query.items() if k in declared}
        if query not in (None, "") and len(declared) == 1:
            return {next(iter(declared)): query}
        return {}


def _value_of(raw: Any, spec: Any) -> Any:
    """API inputs are {"type", "value"}; plain values are accepted too. `object` is JSON-decoded."""
    value = raw.get("value") if isinstance(raw, dict) and "value" in raw else raw
    typ = (raw.get("type") if isinstance(raw, dict) else None) or (
        spec.get("type") if isinstance(spec, dict) else None)
    if typ == "object" and isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            log.debug("begin input is not JSON; kept as text")
    return value


def _default(spec: Any) -> Any:
    return spec.get("value") if isinstance(spec, dict) else None
