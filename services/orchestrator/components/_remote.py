"""What the components that ask another agent share (A2AAgent, AgentCall): a text param, and the answer that
arrives in chunks as the `content` output.

As the LLM component does, a Message directly downstream reads the answer live (a `StreamValue`); any other
reader gets the whole text. The first chunk is awaited inside the component's `run`, so a failure before any
text (refused, not found) fails the component where the runner's retries and exception policy apply.
"""
from __future__ import annotations

from typing import Annotated, Any, AsyncIterator

from services.orchestrator.components import _llm
from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.components.params import validator


def _text(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"must be text, not {value!r}")
    return value


Text = Annotated[Any, validator(_text)]  # text or None (not given), for `Required(Text, "...")`


async def set_answer(component: Component, ctx: NodeContext, chunks: AsyncIterator[str],
                     output: str = "content") -> None:
    if _llm.should_stream(component, None):
        rest = await _llm.primed(chunks)
        ctx.set_output(output, "" if rest is None else ctx.stream(rest))
    else:
        ctx.set_output(output, "".join([c async for c in chunks]))
