"""Sandbox service: untrusted Python and JavaScript, one fresh isolated environment per run."""

from services.sandbox.config import SandboxConfig
from services.sandbox.limits import Limits
from services.sandbox.models import ErrorKind, ExecError, ExecRequest, ExecResult, Language, Output

__all__ = ["ErrorKind", "ExecError", "ExecRequest", "ExecResult", "Language", "Limits", "Output", "SandboxConfig"]
