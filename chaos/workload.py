"""The canvas every chaos client runs, and the answer it must end with.

    Begin -> LLM:a (short answer) -> CodeExec:c (the sandbox, a moment's work) -> LLM:b (a long, paced stream)
          -> Message:m "{LLM:a@content}|{CodeExec:c@result}|{LLM:b@content}"

Each LLM component's system prompt names it and its prompt is the user's query (which carries the run's nonce),
so the model server knows whose request each is (chaos/model_server.py). A run takes a few seconds, so every
fault meets runs in each of their components.
"""

from __future__ import annotations

from typing import Any

from chaos.model_server import reply_text

# component id -> (tokens, ms between tokens) of its model's answer
LLM_SHAPES = {"LLM:a": (8, 20), "LLM:b": (40, 40)}
CODE_RESULT = "sandboxed"
CODE = f"import time\n\ndef main():\n    time.sleep(0.3)\n    return '{CODE_RESULT}'\n"  # main's value is the output


def _cpn(name: str, down: list[str], up: list[str], params: dict[str, Any]) -> dict[str, Any]:
    return {"obj": {"component_name": name, "params": params}, "downstream": down, "upstream": up}


def _llm(component: str) -> dict[str, Any]:
    tokens, ms = LLM_SHAPES[component]
    return {"llm_id": f"chaos-{tokens}-{ms}", "sys_prompt": f"component {component}",
            "prompts": [{"role": "user", "content": "{sys.query}"}]}


def canvas() -> dict[str, Any]:
    return {"components": {
        "begin": _cpn("Begin", ["LLM:a"], [], {}),
        "LLM:a": _cpn("LLM", ["CodeExec:c"], ["begin"], _llm("LLM:a")),
        "CodeExec:c": _cpn("CodeExec", ["LLM:b"], ["LLM:a"], {
            "lang": "python", "script": CODE, "outputs": {"result": {"type": "String", "value": ""}}}),
        "LLM:b": _cpn("LLM", ["Message:m"], ["CodeExec:c"], _llm("LLM:b")),
        "Message:m": _cpn("Message", [], ["LLM:b"], {
            "content": ["{LLM:a@content}|{CodeExec:c@result}|{LLM:b@content}"]}),
    }}


def expected_answer(nonce: str, numbers: dict[str, int]) -> str:
    """The run's answer when each LLM component's output is its request `numbers[component]`."""
    a, b = (reply_text(nonce, c, numbers[c], LLM_SHAPES[c][0]) for c in ("LLM:a", "LLM:b"))
    return f"{a}|{CODE_RESULT}|{b}"
