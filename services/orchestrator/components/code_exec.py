"""CodeExec: run Python or JavaScript in the sandbox service; a component and the `execute_code` tool.

Params (RAGFlow `agent/tools/code_exec.py`): `lang` ("python" | "javascript", also "python3"/"nodejs"),
`script` (defines `main(**args)` / `main(args)`), `arguments` ({name: bare ref}, resolved and passed to
main; as a tool, an argument the model sends wins), and `outputs` declaring exactly ONE business
output (its `type`, e.g. "Object", "Array<Number>", is checked against the value; with no declaration
the output is `result` and any JSON value is accepted).
Outputs: `<business output>` (main's value), `content` (the value as text: strings as is, containers
as sorted, indented JSON), `actual_type`, `raw_result`, `attachments` ([]), `_ARTIFACTS` (None), and
`stdout` (what the code printed; a Trellis addition).
As an Agent tool the model sends `lang` and `script`; the observation is `content` plus the printed
output, or the error (exception with the user-code traceback, timeout, limit) so the model can fix it.
"""
from __future__ import annotations

import json
from typing import Annotated, Any

from services.orchestrator.components import _sandbox
from services.orchestrator.components._fields import resolve_operand
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params, validator
from services.orchestrator.engine.variables import StreamValue, to_text

SYSTEM_OUTPUTS = frozenset({"content", "actual_type", "attachments", "_ERROR", "_ARTIFACTS",
                            "_ATTACHMENT_CONTENT", "raw_result", "_created_time", "_elapsed_time", "stdout"})
DEFAULT_SCRIPT = 'def main(arg1: str, arg2: str) -> dict:\n    return {"result": arg1 + arg2}'
_MAX_OBSERVED_OUTPUT = 4000  # characters of stdout/stderr shown to a model

TOOL_DESCRIPTION = """Runs a piece of Python 3 or JavaScript (Node.js) code in an isolated sandbox and returns what its
`main` function returns, as JSON, plus anything it printed. The sandbox has no network and no third-party
packages: use the standard library. Python example (a `main` function MUST be defined):
def main() -> dict:
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    return {"mean": sum(values) / len(values), "max": max(values)}
JavaScript example (define `function main(args)` or export it with `module.exports = { main }`):
function main(args) { return {sum: [1, 2, 3].reduce((a, b) => a + b, 0)} }"""


class CodeExecFailed(RuntimeError):
    """The code ran and failed (exception, timeout, limit) or broke the declared output contract."""


def business_output(outputs: Any) -> tuple[str, str]:
    """(name, expected type) of the one declared business output; ("result", "") when none is declared."""
    if not isinstance(outputs, dict) or not outputs:
        return "result", ""
    names = [n for n in outputs if n not in SYSTEM_OUTPUTS]
    if len(outputs) == 1 and not names:
        names = list(outputs)
    if len(names) != 1:
        raise ValueError(f"declare exactly one business output in outputs, "
                         f"got {len(names)}: {', '.join(names) or 'none'}")
    meta = outputs[names[0]]
    return names[0], str(meta.get("type") or "") if isinstance(meta, dict) else ""


def actual_type(value: Any) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        inner = {actual_type(v) for v in value}
        return f"Array<{inner.pop()}>" if len(inner) == 1 else "Array<Any>"
    return "Any"


def type_matches(expected: str, value: Any) -> bool:
    e = expected.strip()
    low = e.lower()
    if low in ("", "any"):
        return True
    if low.startswith("array<") and low.endswith(">"):
        return isinstance(value, list) and all(type_matches(e[6:-1], v) for v in value)
    if low == "array":
        return isinstance(value, list)
    return {"string": "String", "number": "Number", "boolean": "Boolean", "object": "Object",
            "null": "Null"}.get(low, e) == actual_type(value)


def canonical_content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    return to_text(value)


def _tail(text: str, limit: int = _MAX_OBSERVED_OUTPUT) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def _lang(lang: Any) -> Any:
    if not isinstance(lang, str) or lang.lower() not in _sandbox.LANGUAGES:
        raise ValueError(f"must be 'python' or 'javascript', got {lang!r}")
    return lang


def _script(script: Any) -> Any:
    if not isinstance(script, str) or not script.strip():
        raise ValueError("must be non-empty code defining main")
    return script


def _arguments(arguments: Any) -> Any:
    if arguments is not None and not isinstance(arguments, dict):
        raise ValueError("must be an object {name: reference}")
    return arguments


def _outputs(outputs: Any) -> Any:
    business_output(outputs)  # raises ValueError naming the problem
    return outputs


class CodeExecParams(Params):
    lang: Annotated[Any, validator(_lang)] = "python"
    script: Annotated[Any, validator(_script)] = None  # default: DEFAULT_SCRIPT
    arguments: Annotated[Any, validator(_arguments)] = None  # {name: reference}
    outputs: Annotated[Any, validator(_outputs)] = None  # one business output {name: {type}}


@register
class CodeExec(Component):
    component_name = "CodeExec"
    params_model = CodeExecParams
    params: CodeExecParams

    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        """`execute_code(lang, script)`, as RAGFlow's CodeExecParam.meta."""
        return {"name": "execute_code", "description": TOOL_DESCRIPTION, "parameters": {
            "type": "object",
            "properties": {
                "lang": {"type": "string", "enum": ["python", "javascript"],
                         "description": "The programming language of this piece of code."},
                "script": {"type": "string",
                           "description": "A piece of code in right format. There MUST be main function."},
            },
            "required": ["lang", "script"],
        }}

    def thoughts(self, ctx: NodeContext) -> str:
        return "Running a short script to process data."

    async def run(self, ctx: NodeContext) -> None:
        await self._execute(ctx, {})

    async def call_tool(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        """The Agent's `execute_code`: the value as text plus what the code printed; errors raise."""
        await self._execute(ctx, args)
        text = to_text(ctx.output("content"))
        printed = to_text(ctx.output("stdout")).rstrip()
        if printed:
            text = f"{text}\n\nstdout:\n{_tail(printed)}" if text else f"stdout:\n{_tail(printed)}"
        return text or "null"

    async def _execute(self, ctx: NodeContext, args: dict[str, Any]) -> None:
        lang = str(args.get("lang") or self.params.lang or "python")
        script = args.get("script") or self.params.script or DEFAULT_SCRIPT
        arguments: dict[str, Any] = {}
        for name, ref in (self.params.arguments or {}).items():
            if args.get(name):
                arguments[name] = args[name]
            else:
                value = await resolve_operand(ctx, ref) if ref else None
                arguments[name] = value.text if isinstance(value, StreamValue) else value
            ctx.set_input(name, arguments[name])
        timeout = ctx.settings.timeout_for(self.component_name)
        run = await _sandbox.execute(ctx.services.sandbox, lang, str(script), arguments,
                                     timeout_s=timeout + 5 if timeout else None)
        ctx.set_output("stdout", run.stdout)
        ctx.set_output("attachments", [])
        ctx.set_output("_ARTIFACTS", None)
        if not run.ok:
            raise CodeExecFailed(self._failure(run))
        name, expected = business_output(self.params.outputs)
        value = run.value
        ctx.set_output("raw_result", value)
        ctx.set_output("actual_type", actual_type(value))
        ctx.set_output("content", canonical_content(value))
        if not type_matches(expected, value):
            ctx.set_output(name, None)
            raise CodeExecFailed(f"CodeExec contract mismatch: output '{name}' expects {expected}, "
                                 f"main returned {actual_type(value)}")
        ctx.set_output(name, value)

    @staticmethod
    def _failure(run: _sandbox.SandboxRun) -> str:
        parts = [f"{run.error_kind}: {run.error_message}" if run.error_message else run.error_kind]
        if run.traceback:
            parts.append(run.traceback.rstrip())
        if run.stderr.strip() and run.stderr.strip() not in run.traceback:
            parts.append("stderr:\n" + _tail(run.stderr.rstrip()))
        if run.stdout.strip():
            parts.append("stdout:\n" + _tail(run.stdout.rstrip()))
        return "\n".join(parts)
