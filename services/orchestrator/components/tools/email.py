"""Email, as RAGFlow's `agent/tools/email.py`: sends an HTML email over SMTP (aiosmtplib, no thread).

RAGFlow's params: `smtp_server`, `smtp_port` (465 = TLS from the start; any other port = STARTTLS, which
is required), `email` (the sender), `smtp_username` (else `email`), `password` (else EMAIL_PASSWORD from the
orchestrator's environment), `sender_name`. The model gives `to_email`, `cc_email` (comma-separated),
`subject`, `content` (HTML). The message is RAGFlow's: multipart/alternative with one text/html part,
`From: sender_name <email>`, `To`, `Cc`, a UTF-8 encoded `Subject`; it goes to `to_email` and every `cc_email`.
Output `success` (true), which is also the observation; a failure (authentication refused, no STARTTLS, a
recipient refused...) is an error naming the server.

The SMTP host is guarded as web requests are: its addresses are resolved and checked against the SSRF
policy (private, loopback... refused unless in TRELLIS_SSRF_ALLOWLIST), and the connection goes to the
checked address (no second lookup); TLS still verifies the certificate against the host name.
Time limit per SMTP step: TRELLIS_EMAIL_TIMEOUT_S (default 10 s, as RAGFlow).
"""
from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import ssl
from email.header import Header
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.utils import formataddr
from typing import Annotated, Any

import aiosmtplib
from pydantic import Field

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.params import validator
from services.orchestrator.components.tools._web import WebParams, WebTool
from services.orchestrator.egress.http import EgressBlocked, EgressPolicy


def _given(label: str) -> Any:
    def check(value: Any) -> Any:
        if not str(value or "").strip():
            raise ValueError(f"{label} is empty")
        return value
    return Annotated[Any, validator(check), Field(validate_default=True)]


def _smtp_port(value: Any) -> Any:
    if value not in (None, "") and _port(value) is None:
        raise ValueError(f"must be a port number from 1 to 65535, got {value!r}")
    return value


class EmailParams(WebParams):
    smtp_server: _given("SMTP Server") = ""  # type: ignore[valid-type]
    email: _given("Email") = ""  # type: ignore[valid-type]
    sender_name: _given("Sender Name") = ""  # type: ignore[valid-type]
    smtp_port: Annotated[Any, validator(_smtp_port)] = 465


@register
class Email(WebTool):
    component_name = "Email"
    service = "EMAIL"
    timeout_s = 10.0
    needs_key = False
    exception_output = "success"
    meta = {
        "name": "email",
        "description": "The email is a method of electronic communication for sending and receiving information "
                       "through the Internet. This tool helps users to send emails to one person or to multiple "
                       "recipients with support for CC, BCC, file attachments, and markdown-to-HTML conversion.",
        "parameters": {
            "to_email": {"type": "string", "description": "The target email address.", "default": "{sys.query}",
                         "required": True},
            "cc_email": {"type": "string", "description": "The other email addresses needs to be send to. Comma splited.",
                         "default": "", "required": False},
            "content": {"type": "string", "description": "The content of the email.", "default": "", "required": False},
            "subject": {"type": "string", "description": "The subject/title of the email.", "default": "",
                        "required": False},
        },
    }
    defaults = {"smtp_server": "", "smtp_port": 465, "email": "", "smtp_username": "", "password": "",
                "sender_name": ""}
    params_model = EmailParams  # the generated params (meta, defaults) build on it

    def thoughts(self, ctx: NodeContext) -> str:
        return (f"\nTo: {self.shown(ctx, 'to_email')}\nSubject: {self.shown(ctx, 'subject')}\n"
                "Your email is on its way—sit tight!\n")

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> bool:
        ctx.set_output("success", False)
        to = str(self.option(args, "to_email") or "").strip()
        if not to:
            return False
        cid = ctx.component_id
        password = str(self.params.password or "").strip() or os.environ.get("EMAIL_PASSWORD", "")
        if not password:
            raise FieldError(cid, "params.password", "no SMTP password: set the component's password or EMAIL_PASSWORD")
        server, port = str(self.params.smtp_server).strip(), _port(self.params.smtp_port or 465) or 465
        sender = str(self.params.email).strip()
        cc = str(self.option(args, "cc_email") or "").strip()
        for name, value in (("to_email", to), ("cc_email", cc)):
            if "\r" in value or "\n" in value:  # a line break would add headers (Bcc: ...) to the message
                raise FieldError(cid, name, f"an address list cannot contain line breaks: {value!r}")
        msg = MIMEMultipart("alternative")
        msg["From"] = formataddr((str(Header(str(self.params.sender_name), "utf-8")), sender))
        msg["To"] = to
        if cc:
            msg["Cc"] = cc
        subject = " ".join(str(self.option(args, "subject") or "No Subject").splitlines())
        msg["Subject"] = Header(subject, "utf-8").encode()
        msg.attach(MIMEText(str(self.option(args, "content") or "No content provided"), "html", "utf-8"))
        recipients = [to, *(c.strip() for c in cc.split(",") if c.strip())]
        limit = self.time_limit()
        sock = await self.connect(ctx, server, port, limit)
        smtp = aiosmtplib.SMTP(hostname=server, sock=sock, timeout=limit, use_tls=port == 465,
                               start_tls=port != 465, tls_context=ssl.create_default_context())
        where = f"SMTP server {server}:{port}"
        try:
            await smtp.connect()
            await smtp.login(str(self.params.smtp_username or "").strip() or sender, password)
            await smtp.send_message(msg, sender=sender, recipients=recipients)
        except aiosmtplib.SMTPAuthenticationError:
            raise RuntimeError(f"{cid}: SMTP Authentication failed. Please check your SMTP username(email) and "
                               "authorization code.") from None
        except aiosmtplib.SMTPTimeoutError:
            raise TimeoutError(f"{cid}: Email: {where} did not answer within {limit:g} s") from None
        except aiosmtplib.SMTPException as exc:
            raise RuntimeError(f"{cid}: Email: {where}: {exc}") from None
        finally:
            if smtp.is_connected:
                try:
                    await smtp.quit()
                except aiosmtplib.SMTPException:
                    smtp.close()
            sock.close()
        ctx.set_output("success", True)
        return True

    async def connect(self, ctx: NodeContext, host: str, port: int, limit: float) -> socket.socket:
        """A socket connected to one of `host`'s addresses, every address checked against the SSRF policy."""
        cid, loop = ctx.component_id, asyncio.get_running_loop()
        policy = ctx.http.policy if ctx.http is not None else EgressPolicy.from_entries(ctx.settings.ssrf_allowlist)
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), limit)
        except (OSError, TimeoutError) as exc:
            raise RuntimeError(f"{cid}: Email: cannot resolve SMTP server {host}: {exc}") from None
        try:
            for *_, addr in infos:
                policy.check(f"smtp://{host}:{port}", host, ipaddress.ip_address(addr[0].split("%", 1)[0]))
        except EgressBlocked as exc:
            raise FieldError(cid, "params.smtp_server", str(exc)) from None
        failure: Exception | None = None
        for family, kind, proto, _, addr in infos:  # each checked address in turn (IPv6 then IPv4...)
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, addr), limit)
                return sock
            except (TimeoutError, OSError) as exc:
                sock.close()
                failure = exc
        if isinstance(failure, TimeoutError):
            raise TimeoutError(f"{cid}: Email: SMTP server {host}:{port} did not answer within {limit:g} s")
        raise RuntimeError(f"{cid}: Failed to connect to SMTP server {host}:{port}: {failure}")


def _port(value: Any) -> int | None:
    """A TCP port from a number or numeric text ("465", "465.0"), or None."""
    try:
        port = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return port if 1 <= port <= 65535 and port == float(value) else None
