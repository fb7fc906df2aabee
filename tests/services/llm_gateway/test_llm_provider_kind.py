"""A new provider kind is one module plus its registration: the `echo` kind (tests/support/echo_provider.py),
registered by importing it, is configured through a providers file and serves chat over gRPC."""

from __future__ import annotations

import pytest
from trellis.llm.v1 import chat_pb2 as chat_pb
from trellis.llm.v1 import llm_service_pb2 as llm_pb

from services.common.errors import ServiceError
from services.llm_gateway.providers.openai import OpenAIProvider
from services.llm_gateway.providers_file import load_providers_file
from tests.support.echo_provider import EchoProvider
from tests.support.llm_gateway import llm_gateway, text_of, user

ECHO_FILE = """
factories:
  Echo:
    kind: echo
    prefix: "echo: "
    repeat: 2
    open: false
    models:
      parrot: {}
  Plain:
    base_url: http://127.0.0.1:9/v1
"""


async def test_a_registered_kind_serves_chat_from_the_providers_file(tmp_path):
    path = tmp_path / "providers.yaml"
    path.write_text(ECHO_FILE)
    providers = load_providers_file(path, {})
    assert providers.factories["Plain"].kind == "openai"  # no `kind`: the OpenAI-compatible provider
    async with llm_gateway(providers=providers) as gw:
        assert isinstance(gw.gateway.registry.resolve("parrot@Echo", "chat").provider, EchoProvider)
        with pytest.raises(ServiceError, match="other@Echo"):  # `open: false` reached the registry
            gw.gateway.registry.resolve("other@Echo", "chat")
        said = chat_pb.ChatMessage(role=chat_pb.ROLE_ASSISTANT, content="ok")
        chunks = await gw.chat(llm_pb.ChatRequest(model_id="parrot@Echo",
                                                  messages=[user("first"), said, user("hello there")]))
        plain = gw.gateway.registry.resolve("any-model@Plain", "chat").provider
    assert text_of(chunks) == "echo: hello there hello there"
    assert chunks[-1].finish_reason == chat_pb.FINISH_REASON_STOP
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 5)  # words in, words out
    assert chunks[0].model == "parrot@Echo"
    assert isinstance(plain, OpenAIProvider) and plain.label == "Plain"


@pytest.mark.parametrize(
    "entry,needle",
    [
        ("kind: echo\n    repeat: 0", "factories.Echo.repeat: Input should be greater than or equal to 1"),
        ("kind: echo\n    base_url: http://x", "factories.Echo.base_url: Extra inputs are not permitted"),
        ("kind: parrot", "factories.Echo.kind: unknown provider kind 'parrot'"),
        ("stream: maybe", "factories.Echo.stream: Input should be a valid boolean"),
    ],
)
def test_a_bad_entry_names_the_factory_and_field(tmp_path, entry, needle):
    path = tmp_path / "providers.yaml"
    path.write_text(f"factories:\n  Echo:\n    {entry}\n")
    with pytest.raises(SystemExit) as exc:
        load_providers_file(path, {})
    assert needle in str(exc.value), str(exc.value)
