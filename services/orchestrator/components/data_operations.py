"""DataOperations: reshape objects (dicts) coming from upstream components.

Params (RAGFlow `agent/component/data_operations.py`): `query` (a list of references; each may hold an
object or a list whose object items are taken), `operations` and its arguments:

- `select_keys` (`select_keys=[keys]`): keep only those keys;
- `literal_eval`: strings that look like Python or JSON literals ("1", "true", "None", "[1, 2]",
  "{'a': 1}", '{"a": null}') become values, recursively; anything that does not parse stays a string;
- `combine`: merge every object into one; a key seen twice collects its values into a list;
- `filter_values` (`filter_values=[{key, operator, value}]`): keep objects matching every rule;
  operators `=`, `≠`, `contains`, `start with`, `end with` on the text of the value (the older
  spellings `equals`, `not equals`, `starts with`, `ends with` are accepted);
- `append_or_update` (`updates=[{key, value}]`): set keys; `{refs}` in a value are expanded, and a
  value that is a single reference keeps its type;
- `remove_keys` (`remove_keys=[keys]`), `rename_keys` (`rename_keys=[{old_key, new_key}]`).

Operation names with spaces ("select keys", RAGFlow's older UI) and `recursive_eval` are accepted.
Output `result`: one object for `combine`, a list of objects otherwise. Unlike RAGFlow, an unknown
operation or filter operator is an error, not a silent fallback.
"""
from __future__ import annotations

import ast
import asyncio
import copy
import json
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationInfo, field_validator

from services.orchestrator.components._fields import FieldError, decode_json_container
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, Params, validator
from services.orchestrator.engine.variables import StreamValue, parse_ref

OPERATIONS = ("select_keys", "literal_eval", "combine", "filter_values", "append_or_update",
              "remove_keys", "rename_keys")
_ALIASES = {"recursive_eval": "literal_eval"}
FILTER_OPERATORS = {"=": "=", "equals": "=", "≠": "≠", "!=": "≠", "not equals": "≠",
                    "contains": "contains", "start with": "start with", "starts with": "start with",
                    "end with": "end with", "ends with": "end with"}


def normalize_operation(name: Any) -> str:
    op = str(name or "literal_eval").strip().lower().replace(" ", "_")
    return _ALIASES.get(op, op)


# ------------------------------------------------------------------------------------ pure operations
def select_keys(objects: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    wanted = set(keys)
    return [{k: v for k, v in obj.items() if k in wanted} for obj in objects]


def literal_eval(data: Any) -> Any:
    """RAGFlow's recursive literal evaluation (ast.literal_eval: never executes code)."""
    if isinstance(data, dict):
        return {k: literal_eval(v) for k, v in data.items()}
    if isinstance(data, list):
        return [literal_eval(v) for v in data]
    if isinstance(data, str):
        s = data.strip()
        lowered = s.lower()
        if lowered in _WORDS:
            # RAGFlow lets these through to ast.literal_eval, which only knows True/False/None.
            return _WORDS[lowered]
        if s.startswith(("{", "[", "(", "'", '"')) or s.replace(".", "").isdigit():
            try:
                return _jsonish(ast.literal_eval(s))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
            try:
                return json.loads(s)  # JSON spells true/false/null the other way
            except (ValueError, RecursionError):
                return data
    return data


_WORDS = {"true": True, "false": False, "none": None, "null": None}


def _jsonish(value: Any) -> Any:
    # Tuples and sets have no JSON form: make them lists so outputs stay serialisable.
    if isinstance(value, (tuple, set, frozenset)):
        return [_jsonish(v) for v in value]
    if isinstance(value, list):
        return [_jsonish(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _jsonish(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def combine(objects: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for obj in objects:
        for key, value in obj.items():
            value = copy.deepcopy(value)  # never grow an upstream component's list in place
            if key not in result:
                result[key] = value
            elif isinstance(result[key], list):
                result[key] = [*result[key], *value] if isinstance(value, list) else [*result[key], value]
            else:
                result[key] = [result[key], *value] if isinstance(value, list) else [result[key], value]
    return result


def _norm(value: Any) -> str:
    return "" if value is None else str(value)


def match_rule(obj: dict[str, Any], key: Any, operator: str, target: str) -> bool:
    if key not in obj:
        return False
    v = _norm(obj[key])
    if operator == "=":
        return v == target
    if operator == "≠":
        return v != target
    if operator == "contains":
        return target in v
    if operator == "start with":
        return v.startswith(target)
    return v.endswith(target)  # "end with"


def remove_keys(objects: list[dict[str, Any]], keys: list[Any]) -> list[dict[str, Any]]:
    drop = {k for k in keys if isinstance(k, str)}
    return [{k: v for k, v in obj.items() if k not in drop} for obj in objects]


def rename_keys(objects: list[dict[str, Any]], pairs: list[Any]) -> list[dict[str, Any]]:
    results = []
    for obj in objects:
        new_obj = dict(obj)
        for pair in pairs:
            if not isinstance(pair, dict):
                continue
            old = str(pair.get("old_key") or "").strip()
            new = str(pair.get("new_key") or "").strip()
            if old and new and old != new and old in new_obj:
                new_obj[new] = new_obj.pop(old)
        results.append(new_obj)
    return results


def _as_list(value: Any) -> list[Any]:
    if value is None or value == "":
        return []
    return value if isinstance(value, list) else [value]


# ------------------------------------------------------------------------------------ params
def _operation(name: Any) -> Any:
    if normalize_operation(name) not in OPERATIONS:
        raise ValueError(f"unsupported operation '{name}' (supported: {', '.join(OPERATIONS)})")
    return name


def _filter_operator(op: Any) -> Any:
    if str(op or "=").strip().lower() not in FILTER_OPERATORS:
        raise ValueError(f"unsupported operator '{op}' (supported: =, ≠, contains, start with, end with)")
    return op


class Rule(Entry):
    key: Any = None
    operator: Annotated[Any, validator(_filter_operator)] = "="
    value: Any = None


_RULES = TypeAdapter(list[Rule])


class DataOperationsParams(Params):
    operations: Annotated[Any, validator(_operation)] = None
    query: Any = None  # a reference or a list of them
    select_keys: Any = None
    remove_keys: Any = None
    rename_keys: Any = None  # [{old_key, new_key}]
    updates: Any = None  # [{key, value}]
    filter_values: Any = Field(None, validate_default=True)  # a rule {key, operator, value} or a list of them

    @field_validator("filter_values")
    @classmethod
    def _rules(cls, value: Any, info: ValidationInfo) -> Any:
        """For `filter_values`, the rules parsed (a list stays a list, one rule stays one)."""
        if normalize_operation(info.data.get("operations")) != "filter_values":
            return value
        rules = _RULES.validate_python(_as_list(value))
        return rules if isinstance(value, list) or not rules else rules[0]


# ------------------------------------------------------------------------------------ component
@register
class DataOperations(Component):
    component_name = "DataOperations"
    params_model = DataOperationsParams
    params: DataOperationsParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "DataOperation in progress"

    async def run(self, ctx: NodeContext) -> None:
        op = normalize_operation(self.params.operations)
        objects = await self._collect(ctx)
        p = self.params
        if op == "select_keys":
            result: Any = select_keys(objects, [str(k) for k in _as_list(p.select_keys)])
        elif op == "literal_eval":
            # Large inputs make ast parsing CPU-heavy: keep it off the event loop.
            result = await asyncio.to_thread(literal_eval, objects)
        elif op == "combine":
            result = combine(objects)
        elif op == "filter_values":
            result = await self._filter(ctx, objects)
        elif op == "append_or_update":
            result = await self._append_or_update(ctx, objects)
        elif op == "remove_keys":
            result = remove_keys(objects, _as_list(p.remove_keys))
        else:
            result = rename_keys(objects, _as_list(p.rename_keys))
        ctx.set_output("result", result)

    async def _collect(self, ctx: NodeContext) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for ref in _as_list(self.params.query):
            if not isinstance(ref, str) or not ctx.is_ref(ref):
                raise FieldError(ctx.component_id, "params.query", f"{ref!r} is not a variable reference")
            value = decode_json_container(await ctx.value(ref))
            ctx.set_input(ref, value)
            if isinstance(value, dict):
                objects.append(value)
            elif isinstance(value, list):
                objects.extend(x for x in value if isinstance(x, dict))
        return objects

    async def _filter(self, ctx: NodeContext, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rules = []
        for rule in _as_list(self.params.filter_values):  # Rule models (DataOperationsParams._rules)
            target = _norm(rule.value)
            target = await ctx.render(target) or target
            rules.append((rule.key, FILTER_OPERATORS[str(rule.operator or "=").strip().lower()], target))
        return [obj for obj in objects if all(match_rule(obj, *r) for r in rules)]

    async def _append_or_update(self, ctx: NodeContext, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        updates: list[tuple[str, Any]] = []
        for item in _as_list(self.params.updates):
            if not isinstance(item, dict):
                continue
            key = str(item.get("key") or "").strip()
            if key:
                updates.append((key, await self._update_value(ctx, item.get("value"))))
        results = []
        for obj in objects:
            new_obj = dict(obj)
            for key, value in updates:
                new_obj[key] = copy.deepcopy(value)
            results.append(new_obj)
        return results

    @staticmethod
    async def _update_value(ctx: NodeContext, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        refs = ctx.refs(value)
        if len(refs) == 1 and value.strip().strip("{} ") == refs[0] and parse_ref(refs[0]):
            raw = ctx.get(refs[0])
            return await raw.wait() if isinstance(raw, StreamValue) else raw
        return await ctx.render(value) or value
