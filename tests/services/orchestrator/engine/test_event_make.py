"""`<Event>.make(...)`, the one way events are built, gives what the dataclass constructor gives."""

from __future__ import annotations

import dataclasses

import pytest

from services.orchestrator.engine.events import Event, MessageEnd, NodeStarted

COMMON = dict(run_id="r", session_id="s", node_id="n", timestamp=1.5)


def _required(cls: type) -> dict:
    values = dict(COMMON)
    for f in dataclasses.fields(cls):
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = f"{f.name}-value"
    return values


@pytest.mark.parametrize("cls", Event.__args__, ids=lambda c: c.__name__)
def test_make_equals_the_constructor_with_defaults_and_given_fields(cls):
    values = _required(cls)
    made, built = cls.make(**values), cls(**values)
    assert made == built and type(made) is cls and vars(made) == vars(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.run_id = "other"


def test_default_factories_give_each_event_its_own_value_and_given_values_win():
    a, b = MessageEnd.make(**COMMON), MessageEnd.make(**COMMON)
    assert a.reference == {} and a.reference is not b.reference and a.downloads is not b.downloads
    given = MessageEnd.make(**COMMON, reference={"chunks": [1]}, status="done")
    assert given.reference == {"chunks": [1]} and given.status == "done" and given.path == ()


def test_a_missing_or_unknown_field_is_refused_like_the_constructor():
    with pytest.raises(TypeError, match="component_type"):
        NodeStarted.make(**COMMON, component_name="x")
    with pytest.raises(TypeError, match="colour"):
        NodeStarted.make(**COMMON, component_name="x", component_type="y", colour="red")
