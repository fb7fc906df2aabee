"""Begin: the entry point (id "begin"). Publishes the run's inputs as its outputs (`{begin@k}`)."""
from __future__ import annotations

import json
import logging
from typing import Any, Literal

from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params

log = logging.getLogger(__name__)

MODES = ("conversational", "task", "Webhook", "webhook")


class BeginParams(Params):
    mode: Literal["conversational", "task", "Webhook", "webhook"] | None = None
    inputs: dict[str, Any] | None = None  # {key: {name, type, optional, value}}


@register
class Begin(Component):
    component_name = "Begin"
    params_model = BeginParams
    params: BeginParams

    async def run(self, ctx: NodeContext) -> None:
        declared = self.params.inputs or {}
        req = ctx.request
        given: dict[str, Any] = dict(req.inputs) if req is not None else {}
        if (self.params.mode or "").lower() == "webhook" and req and req.webhook_payload:
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
