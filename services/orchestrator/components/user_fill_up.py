"""UserFillUp ("Await response"): the run pauses here until the user answers a small form.

The first time the run reaches it, it renders `tips` (references interpolated, when `enable_tips`), emits
`UserInputRequired` with the form (`params.inputs`: {field: {name, type, optional, options, value}}) and
returns `Pause`: the run ends with status `waiting_for_user`. The next completion request on the session
carries `inputs`; the run manager resumes the paused run there, on any replica, without running anything
that finished, and this component sets one output per field (plus `tips`). Inside a Loop it pauses again on
every pass. File fields keep what the client sent (a file reference or a list of them); an optional field
that was not answered is None.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from services.orchestrator.components.base import Component, NodeContext, Pause, register
from services.orchestrator.components.params import Params
from services.orchestrator.engine.events import UserInputRequired

DEFAULT_TIPS = "Please fill up the form"


class UserFillUpParams(Params):
    inputs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # {field: {name, type, optional, options}}
    tips: str = DEFAULT_TIPS
    enable_tips: Any = True
    # the wait expires after this many seconds (0: never); then the interrupt cannot be answered (410) and
    # `on_timeout` says what became of the run: fail, use the form's default `value`s, or cancel
    timeout_s: float = Field(0.0, ge=0)
    on_timeout: Literal["fail", "defaults", "cancel"] = "fail"


def _form(inputs: Any) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in inputs.items() if isinstance(v, dict)} if isinstance(inputs, dict) else {}


def missing_fields(params: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """Required fields of the form (in the DSL's params) that the answer leaves empty."""
    out = []
    for name, spec in _form(params.get("inputs")).items():
        if spec.get("optional"):
            continue
        value = answer.get(name)
        if isinstance(value, dict) and "value" in value:
            value = value["value"]
        if value is None or value == "" or value == []:
            out.append(name)
    return out


def default_answer(params: dict[str, Any]) -> dict[str, Any]:
    """The form answered with its fields' default `value`s (what `on_timeout: defaults` resumes the run with)."""
    return {name: spec.get("value") for name, spec in _form(params.get("inputs")).items()}


@register
class UserFillUp(Component):
    component_name = "UserFillUp"
    params_model = UserFillUpParams
    params: UserFillUpParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "Waiting for your input."

    async def run(self, ctx: NodeContext) -> Pause | None:
        tips = await ctx.render(self.params.tips) if self.params.enable_tips else ""
        answer = ctx.take_resume_inputs()
        if answer is None:
            ctx.emit(UserInputRequired, inputs=self.params.inputs, tips=tips)
            return Pause()
        ctx.set_output("tips", tips)
        for name, spec in self.params.inputs.items():
            value = answer.get(name)
            if isinstance(value, dict) and "value" in value:  # RAGFlow's {"type", "value"} shape
                value = value["value"]
            ctx.set_input(name, value)
            ctx.set_output(name, None if spec.get("optional") and value in ("", []) else value)
        return None
