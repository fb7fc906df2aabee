"""Email against a real SMTP server (aiosmtpd) started here: STARTTLS with a certificate made for the
test, AUTH PLAIN/LOGIN, the message RAGFlow builds. The test trusts that certificate through SSL_CERT_FILE,
so the tool's TLS verification is the real one."""
from __future__ import annotations

import asyncio
from email.header import decode_header, make_header

from services.orchestrator.components import get_class
from tests.support.net import free_port
from tests.support.smtp_server import EMAIL_PARAMS
from tests.support.tool_calls import agent_call, node_run, tool_schema

async def test_the_email_goes_out_over_starttls_with_ragflows_message(smtp):
    params = {**EMAIL_PARAMS, "smtp_port": smtp.port, "smtp_username": "bot-login"}
    observation, error, ctx = await agent_call("Email", params, {
        "to_email": "ann@x.example", "cc_email": "bob@x.example,cy@x.example", "subject": "周报 ready",
        "content": "<p>Hello <b>Ann</b></p>"})
    assert error is None and observation in ("True", "true")
    assert smtp.logins == [("bot-login", "app-code")]
    [(sender, rcpts, msg)] = smtp.messages
    assert sender == "bot@trellis.example" and rcpts == ["ann@x.example", "bob@x.example", "cy@x.example"]
    assert str(make_header(decode_header(msg["Subject"]))) == "周报 ready"
    assert str(make_header(decode_header(msg["From"]))) == "Trellis 机器人 <bot@trellis.example>"
    assert msg["To"] == "ann@x.example" and msg["Cc"] == "bob@x.example,cy@x.example"
    assert msg.get_content_type() == "multipart/alternative"
    [part] = msg.get_payload()
    assert part.get_content_type() == "text/html" and part.get_payload(decode=True).decode() == "<p>Hello <b>Ann</b></p>"


async def test_as_a_node_the_password_may_come_from_the_environment(smtp, monkeypatch):
    monkeypatch.setenv("EMAIL_PASSWORD", "app-code")
    params = {**EMAIL_PARAMS, "password": "", "smtp_port": smtp.port, "to_email": "sys.query", "subject": "Hi"}
    ctx = await node_run("Email", params, query="dana@x.example")
    assert ctx.outputs["success"] is True
    assert smtp.logins == [("bot@trellis.example", "app-code")]
    assert smtp.messages[0][1] == ["dana@x.example"]


async def test_a_refused_login_is_ragflows_message_and_nothing_is_sent(smtp):
    observation, error, _ = await agent_call("Email", {**EMAIL_PARAMS, "password": "wrong", "smtp_port": smtp.port},
                                             {"to_email": "ann@x.example"})
    assert observation.startswith("Error: ") and "SMTP Authentication failed" in error
    assert smtp.messages == []


async def test_a_server_that_never_greets_times_out(monkeypatch):
    monkeypatch.setenv("TRELLIS_EMAIL_TIMEOUT_S", "0.3")
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        observation, error, _ = await agent_call("Email", {**EMAIL_PARAMS, "smtp_port": port}, {"to_email": "a@x.example"})
    finally:
        silent.close()
    assert observation.startswith("Error: ") and "did not answer within 0.3 s" in error


async def test_a_private_smtp_host_is_refused_unless_allowed(smtp):
    observation, error, _ = await agent_call("Email", {**EMAIL_PARAMS, "smtp_port": smtp.port},
                                             {"to_email": "ann@x.example"}, allow=False)
    assert observation.startswith("Error: ") and "loopback" in error and "params.smtp_server" in error
    assert smtp.messages == [] and smtp.logins == []


async def test_no_password_and_validation_name_the_fields(smtp):
    _, error, _ = await agent_call("Email", {**EMAIL_PARAMS, "password": "", "smtp_port": smtp.port}, {"to_email": "a@x.example"})
    assert "EMAIL_PASSWORD" in error and "params.password" in error
    issues = get_class("Email").check("Email:x", {"smtp_server": "", "email": "a@x.example"})
    assert {i.field for i in issues} == {"params.smtp_server", "params.sender_name"}


def test_the_model_is_offered_ragflows_function():
    schema = tool_schema("Email", EMAIL_PARAMS)
    assert schema.name == "email_0" and schema.parameters["required"] == ["to_email"]
    assert set(schema.parameters["properties"]) == {"to_email", "cc_email", "content", "subject"}


async def test_a_line_break_in_an_address_is_refused(smtp):
    _, error, _ = await agent_call("Email", {**EMAIL_PARAMS, "smtp_port": smtp.port},
                                   {"to_email": "ann@x.example\r\nBcc: eve@evil.example"})
    assert "to_email" in error and "line breaks" in error and smtp.messages == []


async def test_a_server_that_refuses_connections_is_an_observation():
    port = free_port()  # nothing listens there
    observation, error, _ = await agent_call("Email", {**EMAIL_PARAMS, "smtp_port": port}, {"to_email": "a@x.example"})
    assert observation.startswith("Error: ") and f"Failed to connect to SMTP server 127.0.0.1:{port}" in error
