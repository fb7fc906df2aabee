"""A real SMTP server for the Email tool's tests: STARTTLS with a certificate made for the test, AUTH
PLAIN/LOGIN, every message kept. The fixtures `certificate` and `smtp` (tests/services/orchestrator/tools/
conftest.py) start it; a test trusts the certificate through SSL_CERT_FILE, so TLS verification is the real one."""
from __future__ import annotations

import datetime
import email
import ipaddress
import ssl
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.net import free_port

EMAIL_PARAMS = {"smtp_server": "127.0.0.1", "email": "bot@trellis.example", "password": "app-code",
                "sender_name": "Trellis 机器人"}


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, written into `folder`: (cert.pem, key.pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                       serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem"


class Mailbox:
    def __init__(self):
        self.port = 0
        self.messages = []
        self.logins = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), email.message_from_bytes(envelope.content)))
        return "250 OK"

    def authenticate(self, server, session, envelope, mechanism, auth_data):
        self.logins.append((auth_data.login.decode(), auth_data.password.decode()))
        return AuthResult(success=auth_data.password == b"app-code", handled=False)  # aiosmtpd answers 535


@contextmanager
def smtp_server(cert: Path, key: Path) -> Iterator[Mailbox]:
    """A real SMTP server (aiosmtpd) on a free port of 127.0.0.1 that requires STARTTLS with `cert` and AUTH;
    the password "app-code" is accepted. Its Mailbox has the port, the messages received and the logins tried."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    box = Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=free_port(), tls_context=tls, require_starttls=True,
                            authenticator=box.authenticate, auth_require_tls=True)
    controller.start()
    box.port = controller.port
    try:
        yield box
    finally:
        controller.stop()
