"""The webhook request as RAGFlow reads it: {"query", "headers", "body", "content_type"}.

The query keeps the first value of each name; header names are title-cased (`X-Event`), as RAGFlow's server
hands them over. A Content-Type other than the webhook's `content_types` is refused. The body follows its type:
JSON, a form (multipart files each become a list of one `{name, mime_type, content}`, the content as text, or a
data URI when binary; more than 10 files and the body is empty), urlencoded, or anything else read as JSON when
it parses; a body that cannot be read is `{}`, as in RAGFlow.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.web_request import FileField


log = logging.getLogger(__name__)

MAX_FILES = 10


class ContentTypeMismatch(ValueError):
    """RAGFlow raises it outside its error handling: its generic answer (code 100, the exception's repr)."""


async def read(request: web.Request, expected_type: Any) -> dict[str, Any]:
    query = {k: request.query.get(k) for k in request.query.keys()}
    headers = {k.title(): v for k, v in request.headers.items()}
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
    if ctype and ctype != expected_type:
        raise ContentTypeMismatch(f"Invalid Content-Type: expect '{expected_type}', got '{ctype}'")
    try:
        body = await _body(request, ctype)
    except Exception:  # RAGFlow: an unreadable body is an empty one
        log.info("webhook body unreadable for %s; read as {}", request.path, exc_info=True)
        body = {}
    return {"query": query, "headers": headers, "body": body, "content_type": ctype}


async def _body(request: web.Request, ctype: str) -> Any:
    if ctype == "application/json":
        return await request.json() or {}
    if ctype == "multipart/form-data":
        form = await request.post()
        files = {k: v for k, v in form.items() if isinstance(v, FileField)}
        if len(files) > MAX_FILES:
            raise ValueError("Too many uploaded files")
        return {k: ([_file(v)] if isinstance(v, FileField) else v) for k, v in form.items()}
    if ctype == "application/x-www-form-urlencoded":
        return dict((await request.post()).items())
    raw = await request.read()
    if not raw:
        return {}
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        return {}


def _file(f: FileField) -> dict[str, Any]:
    content = f.file.read()
    mime = f.content_type or "application/octet-stream"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text = f"data:{mime};base64,{base64.b64encode(content).decode()}"
    return {"name": f.filename, "mime_type": mime, "content": text}
