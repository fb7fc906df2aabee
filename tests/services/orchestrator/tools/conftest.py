"""Fixtures for the tool tests: a fake web API and a real SMTP server."""
from __future__ import annotations

import pytest

from tests.support.fake_web_api import FakeWebApi
from tests.support.smtp_server import make_certificate, smtp_server


@pytest.fixture
async def web_api():
    """A local server speaking a web API's shape; add routes with `web_api.route(...)`."""
    async with FakeWebApi() as api:
        yield api


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("smtp-tls"))


@pytest.fixture
def smtp(certificate, monkeypatch):
    """A real SMTP server whose certificate the test trusts (SSL_CERT_FILE); EMAIL_PASSWORD unset."""
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.delenv("EMAIL_PASSWORD", raising=False)
    with smtp_server(cert, key) as box:
        yield box
