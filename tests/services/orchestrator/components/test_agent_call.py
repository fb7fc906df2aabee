"""AgentCall with a stand-in for the run manager's child runs (`Services.children`): the tenant and caller it
passes on, the answer and outputs it makes of the child's events, a failed, refused or paused child. The real
child runs (own session, link, cancel, tenants): tests/e2e/test_agents_calling_agents.py."""

from __future__ import annotations

from typing import Any, AsyncIterator

import pytest

from services.common.errors import NotFound
from services.orchestrator.components.agent_call import AgentCall
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine import events as ev
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest


def event(cls: type, **fields: Any) -> Any:
    return cls.make(run_id="child-1", session_id="s-9", node_id="", timestamp=0.0, **fields)


class Children:
    """Yields `events` (or raises `refusal`) and records what it was asked."""

    def __init__(self, events: list[Any], refusal: Exception | None = None) -> None:
        self.events, self.refusal, self.asked = events, refusal, []

    async def run(self, **asked: Any) -> AsyncIterator[Any]:
        self.asked.append(asked)
        if self.refusal is not None:
            raise self.refusal
        for e in self.events:
            yield e


def finished(**fields: Any) -> Any:
    return event(ev.RunFinished, outputs={}, elapsed_s=0.0, **fields)


def ctx_for(children: Children | None, params: dict) -> NodeContext:
    request = RunRequest(run_id="run-test", tenant_id="tenant-a", user_id="u1")
    return NodeContext.for_test(params, component_id="AgentCall:c", component_name="AgentCall",
                                services=Services(children=children), request=request,
                                globals_={"sys.query": "hi", "env.city": "Oslo"})


async def test_the_childs_answer_and_ids_become_the_outputs():
    children = Children([event(ev.RunStarted, inputs={}), event(ev.MessageDelta, content="Hel"),
                         event(ev.MessageDelta, content="ignored", path=("Iteration:i", "0")),
                         event(ev.MessageDelta, content="lo"), finished()])
    params = {"agent_id": "helper", "query": "about {sys.query}", "inputs": {"city": "{env.city}", "n": 2}}
    ctx = ctx_for(children, params)
    await AgentCall("AgentCall:c", params).run(ctx)
    assert ctx.output("content") == "Hello"
    assert (ctx.output("run_id"), ctx.output("session_id"), ctx.output("status")) == ("child-1", "s-9", "succeeded")
    assert children.asked == [{"tenant_id": "tenant-a", "agent_id": "helper", "query": "about hi",
                                "inputs": {"city": "Oslo", "n": 2}, "parent_run_id": "run-test",
                                "session_id": "", "user_id": "u1"}]


async def test_a_failed_child_fails_the_component_naming_it():
    children = Children([event(ev.RunStarted, inputs={}), finished(error="Agent:x: model down")])
    with pytest.raises(RuntimeError, match=r"^AgentCall:c: agent 'helper' \(run child-1\) failed: Agent:x: model down$"):
        await AgentCall("AgentCall:c", {"agent_id": "helper"}).run(ctx_for(children, {"agent_id": "helper"}))


async def test_a_refused_child_names_the_component_and_the_reason():
    children = Children([], NotFound("agent 'theirs' not found"))
    with pytest.raises(RuntimeError, match=r"^AgentCall:c: agent 'theirs' not found$"):
        await AgentCall("AgentCall:c", {"agent_id": "theirs"}).run(ctx_for(children, {"agent_id": "theirs"}))


async def test_a_child_waiting_for_the_user_answers_with_its_tips():
    children = Children([event(ev.RunStarted, inputs={}), event(ev.UserInputRequired, inputs={}, tips="Which city?"),
                         finished(waiting_for_user=True)])
    ctx = ctx_for(children, {"agent_id": "helper", "session_id": "s-9"})
    await AgentCall("AgentCall:c", {"agent_id": "helper", "session_id": "s-9"}).run(ctx)
    assert (ctx.output("content"), ctx.output("status")) == ("Which city?", "waiting_for_user")
    assert children.asked[0]["session_id"] == "s-9"


async def test_without_child_runs_the_component_says_so():
    with pytest.raises(RuntimeError, match="^AgentCall:c: agents calling agents needs the orchestrator"):
        await AgentCall("AgentCall:c", {"agent_id": "helper"}).run(ctx_for(None, {"agent_id": "helper"}))


def test_params_are_checked():
    assert [i.field for i in AgentCall.check("AgentCall:c", {"agent_id": ""})] == ["params.agent_id"]
