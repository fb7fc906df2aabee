"""RAGFlow's canvases that wait for the user, run conversation by conversation through the engine the way the
run manager drives it: a run pauses at a UserFillUp, the next run replays everything that finished (from the
records of every earlier run of the conversation) and hands the user's answer to the paused component.

- `user_interaction.json` (the template): plan with an Agent, ask the user, search with a second Agent, answer;
- the Go port's fixture: a menu (UserFillUp) routes through a Switch to a demo of each component, most of
  which ask again; its Loop asks on every pass until the answer is 1.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.orchestrator.engine.checkpoint import NodeRecord, Replay, node_key
from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import MessageDelta, NodeFinished, NodeStarted, RunFinished, UserInputRequired
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest, SessionState
from services.orchestrator.engine.validate import compile_plan
from tests.support.canvas import services
from tests.support.template_models import MODES, template_models

DATA = Path(__file__).resolve().parents[3] / "data"


class Conversation:
    """One session: its state and the checkpoint records of its paused run, carried from run to run."""

    def __init__(self, dsl: dict[str, Any], svc: Services) -> None:
        self.plan = compile_plan(load_canvas(dsl))
        self.svc = svc
        self.state = SessionState.fresh(self.plan.variables)
        self.records: list[NodeRecord] = []
        self.waiting: str = ""
        self.runs = 0

    async def turn(self, query: str = "", answer: dict[str, Any] | None = None) -> list[Any]:
        replay = Replay(self.records, {self.waiting: answer or {}}) if self.waiting else None
        if not self.waiting:
            self.records = []
        self.runs += 1
        events = []
        request = RunRequest(run_id=f"run-{self.runs}", session_id="s", query=query)
        async for ev in run(self.plan, request, self.state, self.svc, replay=replay, checkpoints=True):
            if isinstance(ev, NodeRecord):
                self.records.append(NodeRecord.from_json(ev.to_json()))
            else:
                events.append(ev)
        finished = events[-1]
        assert isinstance(finished, RunFinished) and finished.error is None, finished
        asked = [e for e in events if isinstance(e, UserInputRequired)]
        self.waiting = node_key(asked[-1].path, asked[-1].node_id) if finished.waiting_for_user else ""
        return events


def asked(events: list[Any]) -> UserInputRequired | None:
    found = [e for e in events if isinstance(e, UserInputRequired)]
    return found[-1] if found else None


def answer_text(events: list[Any]) -> str:
    return "".join(e.content for e in events if isinstance(e, MessageDelta) and not e.path)


def started(events: list[Any]) -> list[str]:
    return [e.node_id for e in events if isinstance(e, NodeStarted)]


@pytest.mark.parametrize("mode", MODES)
async def test_user_interaction_template_plans_asks_and_answers_with_the_users_feedback(mode) -> None:
    dsl = json.loads((DATA / "templates" / "user_interaction.json").read_text(encoding="utf-8"))
    scripts = {"qwen-turbo": {"rules": [
        {"when": {"system_contains": "Planning Agent"}, "reply": "Search plan: 1) official docs 2) reviews"},
        {"when": {"any_contains": "Await Response feedback"}, "reply": "Searched as you asked: {last_user}"},
    ], "turns": ["unexpected"]}}

    async with template_models(mode, scripts, {"qwen-turbo@Tongyi-Qianwen": "qwen-turbo"}) as tm:
        talk = Conversation(tm.dsl(dsl), services(tm.llm))
        first = await talk.turn("Which laptop should I buy?")
        question = asked(first)
        assert question is not None and question.node_id == "UserFillUp:GoldBroomsRelate"
        assert question.tips.startswith("Here is my search plan:\nSearch plan: 1) official docs")
        assert set(question.inputs) == {"instructions"}
        planner_calls = len(tm.calls_to("qwen-turbo"))
        tm.check(first)

        second = await talk.turn(answer={"instructions": {"type": "paragraph", "value": "only reviews, please"}})
        assert "Agent:LargeFliesMelt" not in started(second)  # the planner finished before the pause
        assert len(tm.calls_to("qwen-turbo")) == planner_calls + 1  # only the second Agent called the model
        assert "only reviews, please" in answer_text(second)
        assert not second[-1].waiting_for_user


@pytest.fixture
def go_fixture() -> Conversation:
    dsl = json.loads((DATA / "dsl_examples" / "go_fixture_all_components.json").read_text(encoding="utf-8"))
    return Conversation(dsl, Services())


@pytest.mark.parametrize("demo, answers, expect", [
    ("text", [{"text": "hello world ragflow"}], "StringTransform:SplitText"),
    ("iteration", [{"csv": "a,b,c"}], "Iteration:IterateList"),
    ("condition", [{"x": "yes"}], "Switch:CondSwitch"),
    ("wait_input", [{"anything": "done"}], "Message:WaitDone"),
    ("message", [], "Message:Only"),
    ("var_assigner", [], "VariableAssigner:SetCounter"),
])
async def test_go_fixture_menu_routes_to_each_demo_through_its_user_inputs(go_fixture, demo, answers, expect) -> None:
    talk = go_fixture
    first = await talk.turn("hi")
    assert asked(first).node_id == "UserFillUp:Menu" and first[-1].waiting_for_user
    events = await talk.turn(answer={"demo": demo})
    for answer in answers:
        assert events[-1].waiting_for_user, f"{demo}: expected a question, got {started(events)}"
        events = await talk.turn(answer=answer)
    assert not events[-1].waiting_for_user
    finished = {e.node_id for e in events if isinstance(e, NodeFinished) and not e.skipped}
    assert expect in finished or any(e.startswith(expect) for e in finished), (demo, sorted(finished))
    assert not [e for e in events if isinstance(e, UserInputRequired) and e.node_id == "UserFillUp:Menu"]


async def test_go_fixture_loop_asks_on_every_pass_until_the_answer_is_one(go_fixture) -> None:
    talk = go_fixture
    await talk.turn("hi")
    events = await talk.turn(answer={"demo": "loop"})
    for value in ("0", "7"):
        question = asked(events)
        assert question is not None and question.node_id == "UserFillUp:LoopInput" and events[-1].waiting_for_user
        events = await talk.turn(answer={"value": value})
    assert asked(events).node_id == "UserFillUp:LoopInput"
    events = await talk.turn(answer={"value": "1"})
    assert not events[-1].waiting_for_user
    assert any(e.node_id == "Message:LoopDone" for e in events if isinstance(e, NodeFinished))


@pytest.mark.parametrize("mode", MODES)
async def test_go_fixture_categorize_demo_asks_the_model_for_the_category(mode) -> None:
    dsl = json.loads((DATA / "dsl_examples" / "go_fixture_all_components.json").read_text(encoding="utf-8"))
    scripts = {"qwen3": {"rules": [{"when": {"system_contains": "打招呼", "contains": "春节快乐"}, "reply": "打招呼"},
                                   {"reply": "Other"}]}}
    async with template_models(mode, scripts, {"Qwen/Qwen3-8B@default@SILICONFLOW": "qwen3"}) as tm:
        talk = Conversation(tm.dsl(dsl), services(tm.llm))
        await talk.turn("hi")
        asked_text = await talk.turn(answer={"demo": "categorize"})
        assert asked(asked_text).node_id == "UserFillUp:CateInput"
        events = await talk.turn(answer={"text": {"type": "paragraph", "value": "春节快乐啊"}})
        [call] = tm.calls_to("qwen3")
    tm.check(events)
    assert not events[-1].waiting_for_user
    ran = {e.node_id for e in events if isinstance(e, NodeFinished) and not e.skipped}
    assert "Message:CateLoop" in ran and not {"Message:CateRetrieval", "Message:CateOther"} & ran
    assert "春节快乐啊" in call.messages[-1].content
