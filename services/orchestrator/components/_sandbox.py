"""The sandbox as CodeExec sees it: RAGFlow's language spellings, and one traced `execute()` call.

`Services.sandbox` is a `SandboxClient` (services/clients/sandbox.py), which owns the protocol; this
adapter adds what is CodeExec's: the spellings RAGFlow accepts, and a clear error when no sandbox is
configured. A failure to run at all raises the client's typed error (`Unavailable`, `ResourceExhausted`...).
"""
from __future__ import annotations

from typing import Any

from services.clients.sandbox import Language, SandboxClient, SandboxRun
from services.orchestrator.engine.tracing import traced_sandbox

__all__ = ["LANGUAGES", "SandboxRun", "SandboxUnavailable", "execute"]

# RAGFlow spellings (CodeExecutionRequest.normalize_language) -> the sandbox's languages.
LANGUAGES: dict[str, Language] = {"python": "python", "python3": "python", "javascript": "javascript",
                                  "nodejs": "javascript", "js": "javascript"}


class SandboxUnavailable(RuntimeError):
    """No sandbox to run the code in (none configured), or a language it does not run."""


@traced_sandbox
async def execute(client: SandboxClient | None, lang: str, code: str, arguments: dict[str, Any], *,
                  timeout_s: float | None) -> SandboxRun:
    if client is None:
        raise SandboxUnavailable("no sandbox service is configured")
    language = LANGUAGES.get(lang.lower())
    if language is None:
        raise SandboxUnavailable(f"unsupported language {lang!r} (python or javascript)")
    return await client.execute(language, code, arguments, timeout_s=timeout_s)
