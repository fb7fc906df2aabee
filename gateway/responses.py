"""The answers of every route as pydantic models: what RAGFlow, OpenAI and envelope clients read.

The view functions (gateway/routes/_views.py, gateway/routes/datasets.py) build these, and the OpenAPI
generator (gateway/openapi/spec.py) publishes their schemas, so the document describes exactly what is
sent. Models allow extra keys: a client must not break when we add a field, as RAGFlow's don't.
"""

from __future__ import annotations

from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from services.common.json_fields import dumps


def json_response(body: Any, *, status: int = 200) -> web.Response:
    """A JSON answer, written by the hot paths' one encoder (orjson: services/common/json_fields.py)."""
    return web.json_response(body, status=status, dumps=dumps)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---- RAGFlow envelopes --------------------------------------------------------------------------------

class RagflowError(_Out):
    """Every RAGFlow error: HTTP 200 (401 for authentication) with a non-zero code."""

    code: int = Field(json_schema_extra={"not": {"const": 0}})  # so a success never passes for an error
    message: str
    data: Any = None


# ---- agents, versions, sessions -------------------------------------------------------------------------

class _Times(_Out):
    create_time: int
    create_date: str | None = None
    update_time: int
    update_date: str | None = None


class AgentOut(_Times):
    id: str
    title: str
    description: str | None = None
    avatar: str | None = None
    canvas_type: str | None = None
    canvas_category: str
    user_id: str
    permission: str
    release: bool
    latest_version_id: str | None = None
    dsl: dict[str, Any] | None = None


class AgentList(_Out):
    canvas: list[AgentOut]
    total: int


class AgentUpdated(_Out):
    update_time: int


class VersionOut(_Times):
    id: str
    agent_id: str
    user_canvas_id: str
    number: int
    title: str
    release: bool
    dsl: dict[str, Any] | None = None


class MessageOut(_Out):
    role: str
    content: str
    id: str | None = None
    created_at: float | None = None
    reference: Any = None


class SessionOut(_Times):
    id: str
    agent_id: str
    name: str
    user_id: str
    source: str
    version_id: str | None = None
    message: list[MessageOut]
    messages: list[MessageOut]  # the key ragflow-sdk 0.22 reads; the same list as `message`
    reference: list[Any]


class PartialDelete(_Out):
    success_count: int
    errors: list[str] = []


class RunLogOut(_Out):
    message_id: str | None = None
    session_id: str | None = None
    status: str | None = None
    error: str | None = None
    logs: list[Any] | None = None
    thoughts: list[Any] | None = None


class CompletionData(_Out):
    """A non-stream RAGFlow completion: the last event with the whole answer in data.content."""

    event: str | None = None
    session_id: str | None = None
    message_id: str | None = None
    data: dict[str, Any] | None = None


# ---- runs, MCP servers -----------------------------------------------------------------------------------

class RunOut(_Out):
    id: str
    session_id: str
    agent_id: str
    status: str  # running, waiting_for_user, succeeded, failed, cancelled
    error: str | None = None
    started_at: float  # epoch seconds
    finished_at: float | None = None
    parent_run_id: str | None = None  # the paused run this one resumed
    caller_run_id: str | None = Field(None, description="the run whose AgentCall started this one")
    attempts: int
    path: list[str]  # top-level components finished so far
    waiting_for: str | None = None  # the component that waits for the user


class McpServerOut(_Times):
    id: str
    name: str
    tenant_id: str
    url: str
    server_type: str
    description: str | None = None
    headers: dict[str, Any]
    variables: dict[str, Any]  # with `tools`: {name: tool}, listed when the server was saved
    timeout: float


class McpServerList(_Out):
    mcp_servers: list[McpServerOut]
    total: int


class McpExported(_Out):
    type: str
    url: str
    name: str
    authorization_token: str
    tools: dict[str, Any]


class McpExport(_Out):
    """GET /api/v1/mcp/servers/{mcp_id}?mode=download."""

    mcpServers: dict[str, McpExported]


class McpImportResult(_Out):
    server: str
    success: bool
    action: str | None = None
    id: str | None = None
    new_name: str | None = None
    message: str | None = None


class McpImported(_Out):
    results: list[McpImportResult]


# ---- datasets, documents, chunks, retrieval ----------------------------------------------------------------

class DatasetOut(_Out):
    id: str
    name: str
    avatar: str | None = None
    description: str | None = None
    embedding_model: str
    permission: str
    chunk_method: str
    parser_config: dict[str, Any]
    chunk_count: int
    document_count: int
    token_num: int
    tenant_id: str
    created_by: str
    language: str
    similarity_threshold: float
    vector_similarity_weight: float
    pagerank: int
    status: str
    create_time: int
    create_date: str | None = None
    update_time: int
    update_date: str | None = None


class DatasetsDeleted(_Out):
    success_count: int
    errors: list[str] = []


class DocumentOut(_Out):
    id: str
    name: str
    dataset_id: str
    chunk_method: str
    parser_config: dict[str, Any]
    source_type: str
    type: str
    created_by: str
    size: int
    token_count: int
    chunk_count: int
    progress: float
    progress_msg: str
    process_begin_at: str | None = None
    process_duration: float
    run: str
    status: str
    meta_fields: dict[str, Any]
    location: str
    thumbnail: str | None = None
    create_time: int
    update_time: int


class DocumentList(_Out):
    docs: list[DocumentOut]
    total: int


class ChunkOut(_Out):
    id: str
    content: str
    document_id: str
    docnm_kwd: str | None = None
    dataset_id: str
    important_keywords: list[str] = []
    questions: list[str] = []
    tag_kwd: list[str] = []
    image_id: str = ""
    available: bool = True
    positions: list[Any] = []


class ChunkList(_Out):
    chunks: list[ChunkOut]
    doc: DocumentOut
    total: int


class ChunkAdded(_Out):
    chunk: ChunkOut


class RetrievedChunk(_Out):
    id: str
    content: str
    document_id: str
    document_keyword: str
    document_name: str
    dataset_id: str
    kb_id: str
    similarity: float
    vector_similarity: float
    term_similarity: float
    positions: list[Any]
    image_id: str
    important_keywords: list[str]
    highlight: str


class DocAgg(_Out):
    doc_name: str
    doc_id: str
    count: int


class RetrievalOut(_Out):
    chunks: list[RetrievedChunk]
    doc_aggs: list[DocAgg]
    total: int


# ---- OpenAI ----------------------------------------------------------------------------------------------

class OpenAIErrorDetail(_Out):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(_Out):
    error: OpenAIErrorDetail


class ChatChoice(_Out):
    index: int
    message: dict[str, Any]
    finish_reason: str | None = None


class ChatCompletion(_Out):
    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: dict[str, Any] | None = None


class ChatCompletionRun(_Out):
    """OpenAI route, `"background": true`: the run goes on (202); join it with `dialect=openai`."""

    id: str  # the run's id
    object: Literal["chat.completion.run"]
    created: int
    model: str  # the agent's id
    status: Literal["in_progress"]
    run_id: str
    session_id: str  # continues the conversation (`session_id` in a later request)


class ModelOut(_Out):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(_Out):
    object: str
    data: list[ModelOut]


# ---- standard envelope -------------------------------------------------------------------------------------

class EnvelopeEvent(_Out):
    type: str
    node_name: str | None = None
    run_id: str | None = None
    timestamp: int | None = None
    thread_id: str | None = None
    data: Any = None
