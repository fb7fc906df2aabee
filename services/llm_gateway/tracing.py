"""The span of one model call, after the OpenTelemetry GenAI semantic conventions: `chat <model>` with
gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model / max_tokens / temperature / top_p,
gen_ai.response.model, gen_ai.response.finish_reasons, gen_ai.usage.input_tokens / output_tokens and the
time to the first token. Message contents are not recorded. Off (services/common/tracing.py), the stream is
returned as it is.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from services.common import tracing
from services.llm_gateway.registry import Resolved
from services.llm_gateway.models import ChatCall, ChatDelta


def traced_chat(r: Resolved, call: ChatCall, deltas: AsyncIterator[ChatDelta]) -> AsyncIterator[ChatDelta]:
    return _traced(r, call, deltas) if tracing.ACTIVE else deltas


async def _traced(r: Resolved, call: ChatCall, deltas: AsyncIterator[ChatDelta]) -> AsyncIterator[ChatDelta]:
    s = call.sampling
    span = tracing.start(f"chat {r.upstream}", kind=tracing.SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": r.factory.lower(), "gen_ai.system": r.factory.lower(),
        "gen_ai.request.model": r.upstream, "trellis.model.id": r.id,
        "gen_ai.request.max_tokens": call.max_tokens or None,
        "gen_ai.request.temperature": s.temperature, "gen_ai.request.top_p": s.top_p,
        "gen_ai.request.tools": len(call.tools) or None})
    start = time.perf_counter()
    first = True
    finish: list[str] = []
    usage = None
    error = None
    try:
        async for delta in deltas:
            if first and (delta.content or delta.tool_calls):
                first = False
                span.set_attribute("trellis.llm.time_to_first_token_s", time.perf_counter() - start)
            if delta.finish_reason:
                finish.append(delta.finish_reason)
            if delta.usage is not None:
                usage = delta.usage
            yield delta
    except (asyncio.CancelledError, GeneratorExit):
        span.set_attribute("trellis.llm.cancelled", True)  # the caller went away: not the model's failure
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        close = getattr(deltas, "aclose", None)
        if close is not None:
            await close()
        tracing.end(span, error, **{
            "gen_ai.response.model": r.upstream, "gen_ai.response.finish_reasons": finish or None,
            "gen_ai.usage.input_tokens": usage.prompt_tokens if usage else None,
            "gen_ai.usage.output_tokens": usage.completion_tokens if usage else None})
