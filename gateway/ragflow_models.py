"""RAGFlow's dataset request models and how it reads them (its api/utils/validation_utils.py), ported.

Unlike the agent routes (gateway/protocol.py, lenient), RAGFlow's dataset routes are strict: the body must
be `application/json`, unknown fields are refused ("Extra inputs are not permitted"), and every problem is
reported as `Field: <loc> - Message: <msg> - Value: <input>`, one line each, with code 101.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Annotated, Any, ClassVar, Literal
from uuid import UUID

from aiohttp import web
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gateway.errors import GatewayError

DATASET_NAME_LIMIT = 128
MAX_PAGE_SIZE = 100  # RAGFlow's REST_API_MAX_PAGE_SIZE
INT32_MAX = 2**31 - 1  # the page numbers and counts of the gRPC messages behind the routes
CHUNK_METHODS = ("naive", "book", "email", "laws", "manual", "one", "paper", "picture", "presentation", "qa", "table",
                 "tag", "resume")
_CHUNK_METHOD_MSG = ("Input should be 'naive', 'book', 'email', 'laws', 'manual', 'one', 'paper', 'picture', "
                     "'presentation', 'qa', 'table', 'tag' or 'resume'")


def format_validation_error(e: ValidationError) -> str:
    lines = []
    for error in e.errors():
        field = ".".join(map(str, error["loc"]))
        value = str(error.get("input"))
        if len(value) > 128:
            value = value[:125] + "..."
        lines.append(f"Field: <{field}> - Message: <{error['msg']}> - Value: <{value}>")
    return "\n".join(lines)


def uuid_hex(v: Any) -> str:
    """RAGFlow's validate_uuid1_hex: any UUID form, returned as 32 lowercase hex digits."""
    try:
        if isinstance(v, UUID):
            return v.hex
        if isinstance(v, str):
            return UUID(v).hex
        raise TypeError
    except (AttributeError, ValueError, TypeError):
        raise PydanticCustomError("invalid_uuid_format", "Invalid UUID format") from None


def _duplicates(ids: list[str]) -> None:
    dups = [item for item, count in Counter(ids).items() if count > 1]
    if dups:
        raise PydanticCustomError("duplicate_uuids", "Duplicate ids: '{duplicate_ids}'", {"duplicate_ids": ", ".join(dups)})


def unique_uuids(v: list[str] | None) -> list[str] | None:
    """RAGFlow's ids check: each a UUID (normalized to hex), none twice; None stays None."""
    if v is None:
        return None
    ids = [uuid_hex(x) for x in v]
    _duplicates(ids)
    return ids


class StrictBody(BaseModel):
    """A RAGFlow dataset-route body: read with RAGFlow's checks and messages (see module doc)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    async def read(cls, request: web.Request) -> Any:
        if request.content_type != "application/json":
            got = request.headers.get("Content-Type") or "None"
            raise GatewayError(f"Unsupported content type: Expected application/json, got {got}", param="body")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise GatewayError(f"request body is too large: {exc.text} (TRELLIS_MAX_BODY_BYTES)", http_status=413) from None
        try:
            payload = json.loads(raw) if raw.strip() else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            payload = None
        if payload is None:
            raise GatewayError("Malformed JSON syntax: Missing commas/brackets or invalid encoding", param="body")
        if not isinstance(payload, dict):
            raise GatewayError(f"Invalid request payload: expected object, got {type(payload).__name__}", param="body")
        try:
            return cls.model_validate(payload)
        except ValidationError as exc:
            raise GatewayError(format_validation_error(exc), param="body") from None


# ---- parser_config -------------------------------------------------------------------------------------

_RAPTOR_PROMPT = ("Summarize the paragraphs below without inventing facts or changing numbers.\nOutput exactly two "
                  "parts in the same language as the source:\n1. First line: a concise title only.\n2. Following "
                  "lines: a concise summary of the content.\nDo not output labels, Markdown headings, bullet points, "
                  "or any other commentary.\n\nParagraphs:\n{cluster_content}")


class RaptorConfig(StrictBody):
    use_raptor: bool = False
    prompt: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = _RAPTOR_PROMPT
    max_token: Annotated[int, Field(ge=512, le=2048)] = 512
    clustering_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    clustering_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    max_cluster: Annotated[int, Field(ge=1, le=1024)] = 64
    random_seed: Annotated[int, Field(ge=0)] = 0
    scope: Literal["file", "dataset"] = "file"
    auto_disable_for_structured_data: bool = True

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, value: Any) -> Any:
        """RAGFlow accepts its old RAPTOR fields without keeping them (a max_token under 512 becomes 512)."""
        if not isinstance(value, dict):
            return value
        value = dict(value)
        ext = value.pop("ext", None)
        if isinstance(ext, dict) and value.get("clustering_threshold") is None and "clustering_threshold" in ext:
            value["clustering_threshold"] = ext["clustering_threshold"]
        for legacy in ("threshold", "clustering_method", "tree_builder"):
            value.pop(legacy, None)
        max_token = value.get("max_token")
        if isinstance(max_token, (int, float)) and not isinstance(max_token, bool) and max_token < 512:
            value["max_token"] = 512
        return value


class GraphragConfig(StrictBody):
    use_graphrag: bool = False
    entity_types: list[str] = Field(default_factory=lambda: ["organization", "person", "geo", "event", "category"])
    method: Literal["light", "general", "ner"] = "light"
    community: bool = False
    resolution: bool = False
    batch_chunk_token_size: Annotated[int, Field(ge=512, le=8196)] = 4096
    retry_attempts: Annotated[int, Field(ge=1, le=10)] = 2
    retry_backoff_seconds: Annotated[float, Field(ge=0.0, le=600.0)] = 2.0
    retry_backoff_max_seconds: Annotated[float, Field(ge=0.0, le=3600.0)] = 60.0
    build_subgraph_timeout_per_chunk_seconds: Annotated[int, Field(ge=1, le=86400)] = 300
    build_subgraph_min_timeout_seconds: Annotated[int, Field(ge=1, le=86400)] = 600
    merge_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = 180
    resolution_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = 1800
    community_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = 1800
    lock_acquire_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = 600


class ParentChildConfig(StrictBody):
    use_parent_child: bool = False
    children_delimiter: Annotated[str, Field(min_length=1)] = "\n"


class ParserConfig(StrictBody):
    auto_keywords: Annotated[int, Field(ge=0, le=32)] = 0
    auto_questions: Annotated[int, Field(ge=0, le=10)] = 0
    chunk_token_num: Annotated[int, Field(ge=1, le=2048)] = 512
    delimiter: Annotated[str, Field(min_length=1)] = "\n"
    # Not given: off (RAGFlow's ParserConfig), whatever the chunk method's defaults say.
    graphrag: GraphragConfig = Field(default_factory=lambda: GraphragConfig(use_graphrag=False))
    html4excel: bool = False
    layout_recognize: str = "DeepDOC"
    parent_child: ParentChildConfig = Field(default_factory=lambda: ParentChildConfig(use_parent_child=False))
    enable_children: bool = False
    children_delimiter: str = ""
    raptor: RaptorConfig = Field(default_factory=lambda: RaptorConfig(use_raptor=False))
    tag_kb_ids: list[str] = Field(default_factory=list)
    topn_tags: Annotated[int, Field(ge=1, le=10)] = 1
    filename_embd_weight: Annotated[float | None, Field(ge=0.0, le=1.0)] = 0.1
    task_page_size: Annotated[int | None, Field(ge=1)] = None
    pages: list[list[int]] | None = None
    compilation_template_group_id: list[str] = Field(default_factory=list)
    ext: dict[str, Any] = Field(default_factory=dict)
    table_column_mode: Literal["auto", "manual"] | None = None
    table_column_roles: dict[str, Literal["indexing", "metadata", "both"]] | None = None


def default_parser_config(chunk_method: str) -> dict[str, Any]:
    """RAGFlow's get_parser_config(chunk_method, None): the stored parser_config of a new dataset."""
    base: dict[str, Any] = {"table_context_size": 0, "image_context_size": 0}
    if chunk_method == "naive":
        raptor = RaptorConfig(use_raptor=True).model_dump(include={"use_raptor", "prompt", "max_token",
                                                                  "clustering_threshold", "clustering_ratio",
                                                                  "max_cluster", "random_seed"})
        graphrag = GraphragConfig(use_graphrag=True).model_dump(exclude={"community", "resolution"})
        base.update({"layout_recognize": "DeepDOC", "chunk_token_num": 512, "delimiter": "\n", "auto_keywords": 0,
                     "auto_questions": 0, "html4excel": False, "topn_tags": 3, "raptor": raptor, "graphrag": graphrag,
                     "parent_child": {"use_parent_child": False, "children_delimiter": "\n"}})
    elif chunk_method in ("qa", "manual", "paper", "book", "laws", "presentation"):
        base.update({"raptor": {"use_raptor": False}, "graphrag": {"use_graphrag": False}})
    return base


def deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`b` over `a`, nested objects merged key by key (RAGFlow's deep_merge)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def merged_parser_config(chunk_method: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """The defaults of `chunk_method` deep-merged with what the request gave (RAGFlow's get_parser_config)."""
    config = deep_merge(default_parser_config(chunk_method), given or {})
    pc = config.get("parent_child") or {}
    if pc.get("use_parent_child"):
        config["children_delimiter"] = pc.get("children_delimiter", "\n")
    elif pc:
        config["children_delimiter"] = ""
    return config


# ---- datasets ----------------------------------------------------------------------------------------------

class CreateDatasetBody(StrictBody):
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=DATASET_NAME_LIMIT)]
    avatar: Annotated[str | None, Field(max_length=65535)] = None
    description: Annotated[str | None, Field(max_length=65535)] = None
    embedding_model: Annotated[str | None, Field(max_length=255)] = None
    permission: Literal["me", "team"] = "me"
    chunk_method: str | None = None
    parser_config: ParserConfig | None = None

    @field_validator("avatar")
    @classmethod
    def _avatar(cls, v: str | None) -> str | None:
        if not v:
            return v
        if "," not in v:
            raise PydanticCustomError("format_invalid", "missing MIME prefix. Expected format: data:<mime>;base64,<data>")
        prefix = v.split(",", 1)[0]
        if not prefix.startswith("data:"):
            raise PydanticCustomError("format_invalid", "invalid MIME prefix format. Must start with 'data:'")
        if prefix[5:].split(";")[0] not in ("image/jpeg", "image/png"):
            raise PydanticCustomError("format_invalid", "Unsupported MIME type. Allowed: {supported_mime_types}",
                                      {"supported_mime_types": ["image/jpeg", "image/png"]})
        return v

    @field_validator("embedding_model", mode="before")
    @classmethod
    def _strip_model(cls, v: Any) -> Any:
        return v.strip() if isinstance(v, str) else v

    @field_validator("embedding_model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is None or re.fullmatch(r"[0-9a-fA-F]{32}", v):
            return v
        if "@" not in v:
            raise PydanticCustomError("format_invalid", "embedding model identifier must follow <model_name>@<provider> format")
        name, provider = v.split("@", 1)
        if not name or not provider:
            raise PydanticCustomError("format_invalid", "both model_name and provider must be non-empty strings")
        if not name.strip() or not provider.strip():
            raise PydanticCustomError("format_invalid", "Model name and provider cannot be whitespace-only strings")
        return v

    @field_validator("parser_config", mode="before")
    @classmethod
    def _empty_config(cls, v: Any) -> Any:
        return None if v == {} else v

    @field_validator("parser_config", mode="after")
    @classmethod
    def _config_size(cls, v: ParserConfig | None) -> ParserConfig | None:
        """RAGFlow's validate_parser_config_json_length: the whole config, serialized, fits a TEXT column."""
        if v is not None and len(json_str := v.model_dump_json()) > 65535:
            raise PydanticCustomError("string_too_long", "Parser config exceeds size limit (max 65,535 characters). "
                                      "Current size: {actual}", {"actual": len(json_str)})
        return v

    @field_validator("chunk_method", mode="wrap")
    @classmethod
    def _chunk_method(cls, v: Any, handler: Any, info: ValidationInfo) -> Any:
        try:
            result = handler(v)
        except Exception:
            raise PydanticCustomError("literal_error", _CHUNK_METHOD_MSG) from None
        if result not in CHUNK_METHODS:
            raise PydanticCustomError("literal_error", _CHUNK_METHOD_MSG)
        return result

    @model_validator(mode="after")
    def _default_method(self) -> "CreateDatasetBody":
        if self.chunk_method is None and "chunk_method" not in self.model_fields_set:
            object.__setattr__(self, "chunk_method", "naive")
        return self

    def parser_config_given(self) -> dict[str, Any] | None:
        """What the request set in parser_config (exclude_unset)."""
        return self.parser_config.model_dump(exclude_unset=True) if self.parser_config else None

    def parser_config_full(self) -> dict[str, Any] | None:
        """parser_config with every default filled in, as RAGFlow's create stores it (so raptor and graphrag
        are off unless given), `ext` lifted."""
        if not self.parser_config:
            return None
        config = self.parser_config.model_dump()
        config.update(config.pop("ext", None) or {})
        return config


class AutoMetadataField(StrictBody):
    key: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
    type: Literal["string", "list", "time", "number"]
    description: Annotated[str | None, Field(max_length=65535)] = None
    enum: list[str] | None = None


class AutoMetadataConfig(StrictBody):
    """RAGFlow's AutoMetadataConfig: the metadata fields a dataset's parser extracts (kept in parser_config)."""

    metadata: list[AutoMetadataField] = Field(default_factory=list)
    built_in_metadata: list[AutoMetadataField] = Field(default_factory=list)


def updated_parser_config(current: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """What a dataset update stores (RAGFlow's update_dataset): the given keys, `parent_child` flattened into
    `children_delimiter`/`enable_children` (and cleared when not in use) and `ext` lifted, over the current."""
    given = dict(given)
    pc = given.get("parent_child") or {}
    if pc.get("use_parent_child"):
        given["children_delimiter"] = pc.get("children_delimiter", "\n")
        given["enable_children"] = pc.get("use_parent_child", True)
    else:
        given.update(children_delimiter="", enable_children=False, parent_child={})
    given.update(given.pop("ext", None) or {})
    return deep_merge(current, given)


class UpdateDatasetBody(CreateDatasetBody):
    """RAGFlow's UpdateDatasetReq: every field optional (only those given change), plus pagerank, language
    and connectors (accepted; Trellis has no connectors)."""

    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=DATASET_NAME_LIMIT)] = ""
    pagerank: Annotated[int, Field(ge=0, le=100)] = 0
    language: Annotated[str | None, Field(max_length=32)] = None
    connectors: list[dict[str, Any]] = Field(default_factory=list)

    def given(self) -> dict[str, Any]:
        """The fields the request set, as RAGFlow dumps them (exclude_unset)."""
        return self.model_dump(exclude_unset=True)


class DeleteDatasetsBody(StrictBody):
    """`ids: null` (or absent) deletes nothing unless `delete_all` is true; `[]` deletes nothing."""

    ids: list[str] | None = None
    delete_all: bool = False

    @field_validator("ids")
    @classmethod
    def _ids(cls, v: list[str] | None) -> list[str] | None:
        return unique_uuids(v)


DOCUMENT_CHUNK_METHODS = ("naive", "manual", "qa", "table", "paper", "book", "laws", "presentation", "picture", "one",
                          "knowledge_graph", "email", "audio", "tag")


class UpdateDocumentBody(BaseModel):
    """RAGFlow's UpdateDocumentReq: strict types, unknown fields ignored; its route reports problems with
    code 102 (after checking the dataset and document). Counts and progress may be sent but not changed."""

    model_config = ConfigDict(extra="ignore", strict=True)
    name: Annotated[str | None, Field(max_length=65535)] = None
    chunk_method: Annotated[str | None, Field(max_length=65535)] = None
    pipeline_id: Annotated[str | None, Field(max_length=65535)] = None
    enabled: Annotated[int | None, Field(ge=0, le=1)] = None
    chunk_count: Annotated[int | None, Field(ge=0)] = None
    token_count: Annotated[int | None, Field(ge=0)] = None
    progress: Annotated[float | None, Field(ge=0.0, le=1.0)] = None
    parser_config: ParserConfig | None = None
    meta_fields: dict[str, Any] | None = Field(default_factory=dict)

    @field_validator("chunk_method")
    @classmethod
    def _chunk_method(cls, v: str | None) -> str | None:
        if v and v not in DOCUMENT_CHUNK_METHODS:
            raise PydanticCustomError("format_invalid", "`chunk_method` {chunk_method} doesn't exist", {"chunk_method": v})
        return v

    @field_validator("meta_fields")
    @classmethod
    def _meta_fields(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        for value in (v or {}).values():
            if isinstance(value, list):
                if not all(isinstance(i, (str, int, float)) for i in value):
                    raise PydanticCustomError("format_invalid", "The type is not supported in list: {v}", {"v": value})
            elif not isinstance(value, (str, int, float)):
                raise PydanticCustomError("format_invalid", "The type is not supported: {v}", {"v": value})
        return v


class DeleteDocumentsBody(StrictBody):
    ids: list[str] | None = None
    delete_all: bool = False

    @field_validator("ids")
    @classmethod
    def _ids(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            _duplicates(v)
        return v


# ---- query strings -------------------------------------------------------------------------------------

def _lenient_page(v: Any) -> int:
    """RAGFlow's validate_rest_api_page: anything that is not a positive integer means page 1."""
    try:
        page = int(v)
    except (TypeError, ValueError):
        return 1
    return min(page, INT32_MAX) if page >= 1 else 1  # a page past the end is empty, however far


def _lenient_page_size(v: Any) -> int:
    """RAGFlow's validate_rest_api_page_size: invalid means 30; above 100 is an error."""
    try:
        size = int(v)
    except (TypeError, ValueError):
        return 30
    if size < 1:
        return 30
    if size > MAX_PAGE_SIZE:
        raise PydanticCustomError("page_size", "page_size must be less than or equal to {max}", {"max": MAX_PAGE_SIZE})
    return size


def _lenient_desc(v: Any) -> bool:
    return str(v).strip().lower() != "false"


def _split(v: Any) -> Any:
    """A query parameter that may repeat: one value may also hold several, comma-separated."""
    values = v if isinstance(v, list) else [v]
    return [part for item in values if isinstance(item, str) for part in item.split(",") if part.strip()]


def _lenient_int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


Multi = Annotated[list[str], BeforeValidator(_split)]
Millis = Annotated[int, BeforeValidator(_lenient_int)]
Page = Annotated[int, BeforeValidator(_lenient_page)]
PageSize = Annotated[int, BeforeValidator(_lenient_page_size)]
Desc = Annotated[bool, BeforeValidator(_lenient_desc)]


class Query(BaseModel):
    """A query string: unknown parameters are ignored (clients send filters we do not implement)."""

    model_config = ConfigDict(extra="ignore")


class PageQuery(Query):
    page: Page = 1
    page_size: PageSize = 30
    orderby: str = "create_time"
    desc: Desc = True


class ListAgentsQuery(PageQuery):
    orderby: str = "create_time"
    keywords: str = ""
    id: str | None = None  # ragflow-sdk 0.22: one agent by id
    title: str | None = None  # ragflow-sdk 0.22: agents with this exact title
    dsl: Desc = True  # false leaves each agent's DSL out


class ListSessionsQuery(PageQuery):
    orderby: str = "update_time"
    id: str | None = None
    user_id: str | None = None


def _max_page_size(v: int) -> int:
    if v > MAX_PAGE_SIZE:
        raise PydanticCustomError("page_size", "page_size must be less than or equal to {max}", {"max": MAX_PAGE_SIZE})
    return v


class ListDatasetsQuery(BaseModel):
    """RAGFlow's ListDatasetReq, strict as its validate_and_parse_request_args reads it: page and page_size
    integers of at least 1, orderby exactly create_time or update_time, desc a boolean as pydantic reads one
    ("yes", "0"...), no unknown parameter; ordered by `orderby`, newest first unless `desc` is false."""

    model_config = ConfigDict(extra="forbid")
    ragflow_errors: ClassVar[bool] = True
    id: str | None = None
    ids: Multi | None = None
    name: str | None = None
    page: Annotated[int, Field(ge=1)] = 1
    page_size: Annotated[int, Field(ge=1), AfterValidator(_max_page_size)] = 30
    orderby: Literal["create_time", "update_time"] = "create_time"
    desc: bool = True
    include_parsing_status: bool = False

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, v: Any) -> Any:
        return None if v is None else uuid_hex(v)

    @field_validator("ids")
    @classmethod
    def _ids(cls, v: list[str] | None) -> list[str] | None:
        return unique_uuids(v)


class ListDocumentsQuery(PageQuery):
    """RAGFlow's document list filters; `ids`, `suffix` and `run` may repeat (or be comma-separated)."""

    id: str | None = None
    name: str | None = None
    keywords: str | None = None
    orderby: str = "create_time"  # create_time, update_time or name; another is code 101
    ids: Multi = Field(default_factory=list)
    suffix: Multi = Field(default_factory=list)
    run: Multi = Field(default_factory=list)  # UNSTART, RUNNING, CANCEL, DONE, FAIL or 0-4
    create_time_from: Millis = 0
    create_time_to: Millis = 0


class ListChunksQuery(Query):
    page: Page = 1
    page_size: PageSize = 30
    keywords: str = ""
    id: str | None = None
