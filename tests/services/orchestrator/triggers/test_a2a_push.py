"""A2A pushes as completion webhooks, their pure parts: the body is the Task as the a2a-sdk parses it for each
notified state, the headers carry the config's token and authentication, bad configs are refused."""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import ParseDict

from services.common.errors import InvalidArgument
from services.orchestrator.triggers import a2a_push
from services.orchestrator.triggers.webhooks_out import public_view

RUN = {"session_id": "s1", "finished_at": "1893456060.4", "error": ""}
END = {"answer": "Hello", "reference": {"chunks": [{"id": "c1"}]}, "tips": "", "session_id": "s1"}


@pytest.mark.parametrize("status,state", [("succeeded", a2a.TASK_STATE_COMPLETED), ("failed", a2a.TASK_STATE_FAILED),
                                          ("cancelled", a2a.TASK_STATE_CANCELED),
                                          ("waiting_for_user", a2a.TASK_STATE_INPUT_REQUIRED)])
def test_the_body_is_the_task_in_the_a2a_shape(status, state):
    run = {**RUN, "error": "boom" if status == "failed" else ""}
    end = {**END, "tips": "Which city?"} if status == "waiting_for_user" else END
    task = ParseDict(a2a_push.task_body("t1", "r2", run, status, end), a2a.StreamResponse()).task
    assert (task.id, task.context_id, task.status.state, task.metadata["run_id"]) == ("t1", "s1", state, "r2")
    assert task.artifacts[0].name == "answer" and task.artifacts[0].parts[0].text == "Hello"
    assert task.artifacts[0].metadata["references"][0]["chunks"][0]["id"] == "c1"
    message = [p.text for p in task.status.message.parts if p.text]
    assert message == {"failed": ["boom"], "waiting_for_user": ["Which city?"]}.get(status, [])


def test_headers_carry_token_and_authentication_and_the_run_api_shows_neither():
    delivery = {"id": "msg_1", "kind": "a2a", "token": "tok", "auth_scheme": "Bearer", "auth_credentials": "key",
                "body": "{}", "url": "https://example.com/hook"}
    headers = a2a_push.headers(delivery)
    assert headers["X-A2A-Notification-Token"] == "tok" and headers["Authorization"] == "Bearer key"
    assert "webhook-signature" not in headers
    assert not {"token", "auth_credentials", "body"} & set(public_view(delivery))
    assert "Authorization" not in a2a_push.headers({**delivery, "auth_credentials": ""})


@pytest.mark.parametrize("url,creds,named", [("ftp://example.com/x", "", "http"), ("https://example.com/x", "k", "scheme")])
def test_bad_configs_are_refused(url, creds, named):
    with pytest.raises(InvalidArgument, match=named):
        a2a_push.push_config("", url, auth_credentials=creds)
    assert a2a_push.push_config("", "https://example.com/x")["id"]
