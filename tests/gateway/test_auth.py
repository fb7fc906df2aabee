"""API keys: the header forms RAGFlow accepts, each dialect's refusal, the key file `trellis up` prints."""

from __future__ import annotations

import stat

import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.auth import KeyRing, bearer_token, ensure_api_key_file, load_keys
from gateway.config import GatewayConfig, parse_api_keys

# RAGFlow's login_required: HTTP 401, code 401 and the repr of its Unauthorized exception, for a missing key too.
RAGFLOW_BAD_KEY = {"code": 401, "message": "<Unauthorized '401: Unauthorized'>", "data": None}


async def test_bearer_prefix_is_optional(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    for header in (f"Bearer {stack.key_a}", stack.key_a, f"bearer   {stack.key_a}"):
        body = await (await stack.client.get(f"/api/v1/agents/{agent.id}", headers={"Authorization": header})).json()
        assert body["code"] == 0, header


async def test_ragflow_paths_answer_the_ragflow_envelope(stack):
    for method, path in [("GET", "/api/v1/agents"), ("POST", "/api/v1/agents/chat/completions"),
                         ("POST", "/api/v1/agents/x/completions"), ("POST", "/api/v1/tasks/x/cancel")]:
        resp = await stack.client.request(method, path, headers={"Authorization": "Bearer wrong"})
        assert resp.status == 401
        assert await resp.json() == RAGFLOW_BAD_KEY
    resp = await stack.client.get("/api/v1/agents")
    assert resp.status == 401 and await resp.json() == RAGFLOW_BAD_KEY
    assert not stack.fake.run_requests


async def test_openai_paths_answer_401_with_openai_body(stack):
    async with openai.AsyncOpenAI(api_key="wrong", base_url=stack.url + "/v1", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as err:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()
    assert err.value.status_code == 401
    assert err.value.body == {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                              "param": None, "code": "invalid_api_key"}
    resp = await stack.client.post("/api/v1/agents_openai/x/chat/completions", json={})
    assert resp.status == 401 and (await resp.json())["error"]["code"] == "invalid_api_key"


async def test_envelope_path_answers_401_with_an_error_envelope(stack):
    resp = await stack.client.post("/api/v1/agents/x/stream", json={"query": "hi"}, headers={"Authorization": "nope"})
    body = await resp.json()
    assert resp.status == 401
    assert body["type"] == "error" and body["data"]["message"] == "Incorrect API key provided."


def test_parse_api_keys():
    assert parse_api_keys("k1:t1, k2:t2,,k3") == {"k1": "t1", "k2": "t2", "k3": "default"}
    with pytest.raises(SystemExit, match="TRELLIS_API_KEYS"):
        parse_api_keys("k1:")


def test_key_file_is_created_once_private_and_reused(tmp_path):
    path = tmp_path / "sub" / "api_key"
    key = ensure_api_key_file(path)
    assert key.startswith("trellis-") and len(key) > 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_api_key_file(path) == key
    cfg = GatewayConfig(host="h", port=0, upstreams={}, health_timeout_s=1, api_key_file=str(path))
    assert load_keys(cfg) == {key: "default"}


def test_from_env_uses_the_data_dir_only_without_configured_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TRELLIS_API_KEYS", raising=False)
    assert GatewayConfig.from_env().api_key_file == str(tmp_path / "api_key")
    monkeypatch.setenv("TRELLIS_API_KEYS", "abc:acme")
    cfg = GatewayConfig.from_env()
    assert cfg.api_keys == {"abc": "acme"} and cfg.api_key_file == ""


def test_keyring_lookup():
    ring = KeyRing({"k": "t"})
    assert ring.tenant_for("Bearer k") == "t" and ring.tenant_for("k") == "t"
    assert ring.tenant_for("Bearer k2") is None and ring.tenant_for("") is None and ring.tenant_for(None) is None
    assert bearer_token("Bearer  abc ") == "abc"


async def test_gateway_creates_the_key_file_at_startup_and_accepts_it(stack, tmp_path):
    path = tmp_path / "api_key"
    client = TestClient(TestServer(create_app(stack.config(api_keys={}, api_key_file=str(path)))))
    await client.start_server()
    try:
        key = path.read_text().strip()
        ok = await (await client.get("/api/v1/agents", headers={"Authorization": f"Bearer {key}"})).json()
        bad = await (await client.get("/api/v1/agents", headers={"Authorization": "Bearer x"})).json()
    finally:
        await client.close()
    assert ok == {"code": 0, "message": "success", "data": {"canvas": [], "total": 0}}
    assert bad == RAGFLOW_BAD_KEY
