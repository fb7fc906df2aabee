"""Request bodies of every route (pydantic), and reading them into a clear 400 when they are wrong.

Models keep unknown keys (`extra="allow"`): RAGFlow and OpenAI clients send fields we do not use, and
refusing them would break those clients.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from aiohttp import web
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from gateway.errors import GatewayError

M = TypeVar("M", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


def truthy(value: Any) -> bool:
    """RAGFlow's `release` and friends arrive as bools or as strings such as "true"."""
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


# ---- RAGFlow agents, versions, sessions -------------------------------------------------------------

class CreateAgentBody(_Body):
    # Both optional here: a missing one gets RAGFlow's own message ("No DSL data in request.").
    title: str | None = None
    dsl: dict[str, Any] | str | None = None
    description: str | None = None
    canvas_type: str | None = None
    canvas_category: str | None = None
    release: Any = None


class UpdateAgentBody(_Body):
    title: str | None = None
    dsl: dict[str, Any] | str | None = None
    description: str | None = None
    canvas_type: str | None = None
    canvas_category: str | None = None
    release: Any = None


class PublishBody(_Body):
    title: str | None = None


class CreateSessionBody(_Body):
    name: str | None = None
    user_id: str | None = None
    release: Any = None
    version_id: str | None = None


class DeleteSessionsBody(_Body):
    ids: list[str] | None = None
    delete_all: bool | None = None


class PatchTaskBody(_Body):
    action: str  # only "stop"


# ---- runs -------------------------------------------------------------------------------------------

class ChatMessageIn(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """OpenAI content is a string or a list of parts; the text parts are joined."""
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text")
        return self.content or ""


MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]
WebhookEvent = Literal["run.succeeded", "run.failed", "run.waiting_for_user", "run.cancelled"]


def _webhook_url(value: str) -> str:
    parsed = urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise PydanticCustomError("webhook_url", "must be an http(s) URL with a host, not {raw}", {"raw": repr(value)})
    return value


def _webhook_secret(value: str) -> str:
    """Standard Webhooks' form: `whsec_` + base64 (the orchestrator checks it again; here the error names the field)."""
    try:
        ok = value.startswith("whsec_") and bool(base64.b64decode(value[6:], validate=True))
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise PydanticCustomError("webhook_secret", "must be 'whsec_' followed by base64")
    return value


class CompletionWebhookIn(BaseModel):
    """A run's own completion webhook (docs/triggers.md): its end is POSTed to `url`, signed with `secret`."""

    model_config = ConfigDict(extra="forbid")
    url: Annotated[str, AfterValidator(_webhook_url)] = Field(description="http(s) URL the run's end is POSTed to")
    events: list[WebhookEvent] | None = Field(None, description="the ends to notify (default: all four)")
    # required: a secret made here could not be returned to anyone who verifies with it
    secret: Annotated[str, AfterValidator(_webhook_secret)] = Field(
        description="whsec_ + base64: the deliveries are signed with it (Standard Webhooks)")


class RagflowCompletionBody(_Body):
    # "continue": the run goes on when the client disconnects (rejoin with Last-Event-ID); default "cancel"
    on_disconnect: Literal["cancel", "continue"] = "cancel"
    # true: answer 202 with the run's ids at once; the run goes on (GET .../runs/{run_id}/join or /events)
    background: bool = Field(False, description="answer 202 with the run's ids at once; the run goes on")
    # the run's end POSTed to a URL of the caller's, signed (docs/triggers.md, "Completion webhooks")
    completion_webhook: CompletionWebhookIn | None = Field(
        None, description="this run's end POSTed to a URL, signed (docs/triggers.md, Completion webhooks)")
    # the session runs a run already (double-texting): refuse with 409, start after it, cancel it (its turn
    # stays) or cancel it and remove its turn; unset: the agent's default (Begin's param), else "busy"
    multitask_strategy: MultitaskStrategy | None = None
    agent_id: str | None = None
    query: str | None = None
    question: str | None = None  # the legacy name of `query`
    stream: bool | None = None  # default depends on the route
    session_id: str | None = None
    inputs: dict[str, Any] | None = None
    files: list[dict[str, Any]] | None = None
    user_id: str | None = None
    return_trace: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    custom_header: dict[str, Any] | str | None = None
    release: Any = None
    version_id: str | None = None
    openai_compatible: bool = Field(False, alias="openai-compatible")
    # openai-compatible mode
    messages: list[ChatMessageIn] | None = None
    id: str | None = None
    metadata: dict[str, Any] | None = None

    def text(self) -> str:
        return self.query if self.query is not None else (self.question or "")


class StreamOptions(_Body):
    include_usage: bool = False


class OpenAIChatBody(_Body):
    # "continue": the run goes on when the client disconnects (rejoin with Last-Event-ID); default "cancel"
    on_disconnect: Literal["cancel", "continue"] = "cancel"
    # true: answer 202 with the run's ids at once; the run goes on (GET .../runs/{run_id}/join or /events)
    background: bool = Field(False, description="answer 202 with the run's ids at once; the run goes on")
    # the run's end POSTed to a URL of the caller's, signed (docs/triggers.md, "Completion webhooks")
    completion_webhook: CompletionWebhookIn | None = Field(
        None, description="this run's end POSTed to a URL, signed (docs/triggers.md, Completion webhooks)")
    model: str | None = None
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool | None = None  # RAGFlow's agents_openai default: false
    stream_options: StreamOptions | None = None
    session_id: str | None = None
    id: str | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    inputs: dict[str, Any] | None = None  # Begin inputs, via the client's extra_body

    def conversation_id(self) -> str:
        """RAGFlow: `session_id`, else `id`, else `metadata.id`."""
        return self.session_id or self.id or str((self.metadata or {}).get("id") or "")


class EnvelopeRunBody(_Body):
    # "continue": the run goes on when the client disconnects (rejoin with Last-Event-ID); default "cancel"
    on_disconnect: Literal["cancel", "continue"] = "cancel"
    # true: answer 202 with the run's ids at once; the run goes on (GET .../runs/{run_id}/join or /events)
    background: bool = Field(False, description="answer 202 with the run's ids at once; the run goes on")
    # the run's end POSTed to a URL of the caller's, signed (docs/triggers.md, "Completion webhooks")
    completion_webhook: CompletionWebhookIn | None = Field(
        None, description="this run's end POSTed to a URL, signed (docs/triggers.md, Completion webhooks)")
    query: str | None = None
    message: str | None = None  # the seed's name for the user's text
    thread_id: str | None = None
    session_id: str | None = None
    inputs: dict[str, Any] | None = None
    user_id: str | None = None
    version_id: str | None = None
    draft: bool | None = None

    def text(self) -> str:
        return self.query if self.query is not None else (self.message or "")


# ---- MCP servers (RAGFlow's mcp_api.py) -------------------------------------------------------------

# A tool call or a listing that may wait longer than a day is a mistake, and a deadline past what gRPC can
# represent would expire at once ("did not answer in time"), so the limit is refused by name instead.
MAX_SECONDS = 86400.0


def _seconds(value: Any) -> float | None:
    """An MCP `timeout`: a number of seconds from 0 to MAX_SECONDS (a numeric string too, as RAGFlow's get_float reads it);
    absent, null or "": the default."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise PydanticCustomError("seconds", "must be a number of seconds, not {raw}", {"raw": repr(value)}) from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise PydanticCustomError("seconds", "must be a number of seconds from 0 to {max}, not {raw}",
                                  {"raw": repr(value), "max": MAX_SECONDS})
    return seconds


Seconds = Annotated[Annotated[float, Field(ge=0, le=MAX_SECONDS)] | None, BeforeValidator(_seconds)]
JsonObject = dict[str, Any] | str | None  # an object, or a string holding one (RAGFlow's safe_json_parse)


class RequiredArgsBody(_Body):
    """A body RAGFlow checks with `validate_request`: each field without a default must be present, else code
    101 "required argument are missing: a,b; "; then the types, as any body."""

    @classmethod
    async def read(cls, request: web.Request) -> Any:
        raw = await read_json(request)
        missing = [f.alias or name for name, f in cls.model_fields.items() if f.is_required() and (f.alias or name) not in raw]
        if missing:
            raise GatewayError(f"required argument are missing: {','.join(missing)}; ", param=missing[0])
        return parse(cls, raw)


class McpServerFields(RequiredArgsBody):
    description: str | None = None
    headers: JsonObject = None  # `$name` in a value takes variable `name`
    variables: JsonObject = None
    timeout: Seconds = None  # the server's tool call limit; also bounds listing its tools now (default 10 s)


class CreateMcpServerBody(McpServerFields):
    name: str
    url: str
    server_type: str  # "sse" or "streamable-http"


class UpdateMcpServerBody(McpServerFields):
    name: str | None = None
    url: str | None = None
    server_type: str | None = None


class McpTestBody(McpServerFields):
    url: str
    server_type: str


class ImportMcpServersBody(RequiredArgsBody):
    mcpServers: dict[str, Any]  # {name: {"type", "url", "authorization_token"?, ...}}
    timeout: Seconds = None


# ---- reading ----------------------------------------------------------------------------------------

async def read_json(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; an empty body is {}. Oversized, malformed or non-object bodies -> 4xx."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        # aiohttp's text names the limit: "Maximum request body size N exceeded, actual body size M".
        raise GatewayError(f"request body is too large: {exc.text} (TRELLIS_MAX_BODY_BYTES)", http_status=413) from None
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f": {exc.msg} at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise GatewayError(f"request body is not valid JSON{where}") from None
    if not isinstance(body, dict):
        raise GatewayError(f"request body must be a JSON object, not {type(body).__name__}")
    return body


def parse(model: type[M], body: dict[str, Any]) -> M:
    """Validate `body`; the first problem becomes one sentence naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        message = "is required" if first["type"] == "missing" else first["msg"]
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise GatewayError(f"invalid request body: field `{field}` {message}{more}", param=field) from None


async def read_body(request: web.Request, model: type[M]) -> M:
    return parse(model, await read_json(request))


def parse_query(request: web.Request, model: type[M]) -> M:
    """The query string validated with `model` (a repeated parameter keeps its last value)."""
    try:
        return model.model_validate(dict(request.query))
    except ValidationError as exc:
        if getattr(model, "ragflow_errors", False):  # RAGFlow's validate_and_parse_request_args wording
            from gateway.ragflow_models import format_validation_error

            raise GatewayError(format_validation_error(exc), param="query") from None
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "query"
        raise GatewayError(first["msg"] if first["type"] == "page_size" else
                           f"query parameter `{field}`: {first['msg']}", param=field) from None


def dsl_text(dsl: dict[str, Any] | str) -> str:
    """The DSL as JSON text for the orchestrator; a string must itself be a JSON object."""
    if isinstance(dsl, str):
        try:
            value = json.loads(dsl)
        except json.JSONDecodeError as exc:
            raise GatewayError(f"invalid request body: field `dsl` is not valid JSON: {exc.msg}", param="dsl") from None
        if not isinstance(value, dict):
            raise GatewayError("invalid request body: field `dsl` must be a JSON object", param="dsl")
        return dsl
    return json.dumps(dsl, ensure_ascii=False)
