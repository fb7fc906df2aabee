"""Domain types -> OpenAI chat-completions request fields. llama-cpp-python takes the same shapes."""

from __future__ import annotations

from typing import Any

from services.llm_gateway.models import ChatCall, ForceTool, Message, ResponseFormat, Sampling, Tool, ToolChoice


def message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        # OpenAI wants null content next to tool calls when there is no text.
        out["content"] = m.content or None
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
        ]
    if m.name:
        out["name"] = m.name
    return out


def tool(t: Tool) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": t.name, "parameters": t.parameters}
    if t.description:
        fn["description"] = t.description
    return {"type": "function", "function": fn}


def tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, ForceTool):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def response_format(fmt: ResponseFormat) -> dict[str, Any] | None:
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.type == "json_schema":
        schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema or {}}
        if fmt.strict:
            schema["strict"] = True
        return {"type": "json_schema", "json_schema": schema}
    return None


def sampling(s: Sampling) -> dict[str, Any]:
    values = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "seed": s.seed,
    }
    return {k: v for k, v in values.items() if v is not None}


def chat_kwargs(call: ChatCall) -> dict[str, Any]:
    """The keyword arguments of `chat.completions.create` for `call` (without the stream flags)."""
    kwargs: dict[str, Any] = {"model": call.model, "messages": [message(m) for m in call.messages]}
    # tool_choice without tools is left out: some servers reject the lone field, and it means nothing.
    if call.tools:
        kwargs["tools"] = [tool(t) for t in call.tools]
        if call.tool_choice is not None:
            kwargs["tool_choice"] = tool_choice(call.tool_choice)
    if call.response_format is not None:
        fmt = response_format(call.response_format)
        if fmt is not None:
            kwargs["response_format"] = fmt
    kwargs.update(sampling(call.sampling))
    if call.max_tokens > 0:
        kwargs["max_tokens"] = call.max_tokens
    if call.stop:
        kwargs["stop"] = list(call.stop)
    return kwargs
