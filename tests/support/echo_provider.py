"""A provider kind written the way docs/adding-a-provider.md says, touching no file under services/: `echo`
streams the last user message back, one word per delta. Importing this module registers the kind, so a
providers-file factory can name it:

    factories:
      Echo:
        kind: echo
        prefix: "echo: "       # put before the answer
        repeat: 2              # the message this many times, space-separated
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Literal

from pydantic import Field

from services.llm_gateway.models import ChatCall, ChatDelta, Usage
from services.llm_gateway.providers import Provider, ProviderSettings, register


class EchoSettings(ProviderSettings):
    kind: Literal["echo"] = "echo"
    prefix: str = ""
    repeat: int = Field(1, ge=1, le=10)


@register
class EchoProvider(Provider):
    kind = "echo"
    Settings = EchoSettings

    def __init__(self, label: str, *, prefix: str, repeat: int) -> None:
        self.label = label
        self.prefix = prefix
        self.repeat = repeat

    @classmethod
    def from_spec(cls, factory: str, settings: ProviderSettings) -> "EchoProvider":
        assert isinstance(settings, EchoSettings)
        return cls(factory, prefix=settings.prefix, repeat=settings.repeat)

    async def stream(self, call: ChatCall, *, timeout: float) -> AsyncIterator[ChatDelta]:
        said = next((m.content for m in reversed(call.messages) if m.role == "user"), "")
        words = (self.prefix + " ".join([said] * self.repeat)).split(" ")
        for i, word in enumerate(words):
            yield ChatDelta(content=word if i == 0 else " " + word)
            await asyncio.sleep(0)  # a real stream awaits its upstream between deltas
        yield ChatDelta(finish_reason="stop", usage=Usage(len(said.split()), len(words)))
