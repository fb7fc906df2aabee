"""ListOperations: pick, slice, filter, sort or de-duplicate a list.

Params (RAGFlow `agent/component/list_operations.py`): `query` (reference to an array, required),
`operations` (default "nth"), `n`, `strict`, `sort_method` ("asc" | "desc"), `sort_by`
(comma-separated keys for lists of objects: primary, then tie-breaks), `filter` ({operator, value}).

- `nth`: the n-th item, 1-based; negative n counts from the end; out of range -> [] (error if strict);
- `head` (alias `topN`): the first n items; `tail`: the last n (n < 1 -> [], strict wants 1 <= n <= len);
- `filter`: items whose text matches `=`, `≠`, `contains`, `start with`, `end with` against the value;
- `sort`: numbers before everything else, numbers numerically, the rest by text (a total order,
  so mixed lists never raise); objects by `sort_by` keys, or by their whole content;
- `drop_duplicates`: the first occurrence of each distinct item (objects compared by content).

Outputs `result` (a list), `first` and `last` (None for an empty result). A missing input (a branch
that did not run) is an empty list; a value that is not a list fails the node.
"""
from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from services.orchestrator.components._fields import FieldError, as_bool, decode_json_container, type_name
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, Params, Required, validator

OPERATIONS = ("nth", "head", "tail", "filter", "sort", "drop_duplicates")
FILTER_OPERATORS = ("=", "≠", "contains", "start with", "end with")


def normalize_operation(name: Any) -> str:
    op = "" if name is None else str(name).strip()
    if op.lower() == "topn":
        return "head"
    return op or "nth"


def _coerce_n(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _operation(name: Any) -> Any:
    if normalize_operation(name) not in OPERATIONS:
        raise ValueError(f"unsupported operation '{name}' (supported: {', '.join(OPERATIONS)}, topN)")
    return name


def _filter_operator(op: Any) -> Any:
    if op not in FILTER_OPERATORS:
        raise ValueError(f"must be one of {', '.join(FILTER_OPERATORS)}")
    return op


class Filter(Entry):
    operator: Annotated[Any, validator(_filter_operator)] = "="
    value: Any = ""  # {refs} in it are expanded


class ListOperationsParams(Params):
    query: Required(Any, "is required (a reference to an array)") = None  # type: ignore[valid-type]
    operations: Annotated[Any, validator(_operation)] = "nth"
    n: Any = 0
    strict: Any = False
    sort_method: Any = "asc"
    sort_by: Any = None
    filter: Filter | None = Field(None, validate_default=True)

    @field_validator("filter")
    @classmethod
    def _filter_given(cls, spec: Filter | None, info: ValidationInfo) -> Filter | None:
        if spec is None and normalize_operation(info.data.get("operations")) == "filter":
            raise ValueError("must be an object {operator, value}")
        return spec


class StrictRangeError(ValueError):
    """n is out of range for nth/head/tail in strict mode."""


def _range_error(operation: str, n: int) -> StrictRangeError:
    return StrictRangeError(f"{operation} requires n to be within the valid range in strict mode, got {n}.")


# ------------------------------------------------------------------------------------ pure operations
def nth(items: list[Any], n: int, strict: bool = False) -> list[Any]:
    if n != 0 and abs(n) <= len(items):
        return [items[n - 1] if n > 0 else items[n]]
    if strict:
        raise _range_error("nth", n)
    return []


def head(items: list[Any], n: int, strict: bool = False) -> list[Any]:
    if strict and not 1 <= n <= len(items):
        raise _range_error("head", n)
    return items[:n] if n >= 1 else []


def tail(items: list[Any], n: int, strict: bool = False) -> list[Any]:
    if strict and not 1 <= n <= len(items):
        raise _range_error("tail", n)
    return items[-n:] if n >= 1 else []


def _norm(value: Any) -> str:
    return "" if value is None else str(value)


def filter_items(items: list[Any], operator: str, value: str) -> list[Any]:
    def keep(v: str) -> bool:
        if operator == "=":
            return v == value
        if operator == "≠":
            return v != value
        if operator == "contains":
            return value in v
        if operator == "start with":
            return v.startswith(value)
        return v.endswith(value)  # "end with"

    return [item for item in items if keep(_norm(item))]


def _format_scalar(value: Any) -> str:
    # Same text as RAGFlow's Go-compatible comparator, so both runtimes order alike.
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def scalar_key(value: Any) -> tuple[Any, ...]:
    """Total order: numbers first (numerically), then everything else by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), _format_scalar(value))
    if isinstance(value, (dict, list, tuple)):
        return (1, json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))
    return (1, _format_scalar(value))


def _content_key(value: Any) -> Any:
    """An orderable key for any JSON value (objects sorted by key, then by their values)."""
    if isinstance(value, dict):
        return (2, tuple((str(k), _content_key(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))))
    if isinstance(value, (list, tuple)):
        return (2, tuple(_content_key(v) for v in value))
    return scalar_key(value)


def parse_sort_by(raw: Any) -> list[str]:
    if isinstance(raw, (list, tuple)):
        return [str(k).strip() for k in raw if str(k).strip()]
    return [k.strip() for k in str(raw or "").split(",") if k.strip()]


def sort_items(items: list[Any], descending: bool = False, sort_by: list[str] | None = None) -> list[Any]:
    if not items:
        return []
    if isinstance(items[0], dict):
        if sort_by:
            def key(x: Any) -> Any:
                return tuple(scalar_key(x.get(k) if isinstance(x, dict) else None) for k in sort_by)
        else:
            key = _content_key
    else:
        key = scalar_key
    return sorted(items, key=key, reverse=descending)


def hashable(value: Any) -> Any:
    if isinstance(value, bool):
        return ("__bool__", value)  # True == 1 in Python; in JSON they are different values
    if isinstance(value, dict):
        return ("__dict__", tuple(sorted(((str(k), hashable(v)) for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, (list, tuple)):
        return ("__list__", tuple(hashable(v) for v in value))
    if isinstance(value, set):
        return ("__set__", tuple(sorted((hashable(v) for v in value), key=repr)))
    return value


def drop_duplicates(items: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for item in items:
        k = hashable(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


# ------------------------------------------------------------------------------------ component
@register
class ListOperations(Component):
    component_name = "ListOperations"
    params_model = ListOperationsParams
    params: ListOperationsParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "ListOperation in progress"

    async def run(self, ctx: NodeContext) -> None:
        p = self.params
        cid = ctx.component_id
        op = normalize_operation(p.operations)
        ref = p.query
        if not isinstance(ref, str) or not ctx.is_ref(ref):
            raise FieldError(cid, "params.query", f"{ref!r} is not a reference to an array")
        items = decode_json_container(await ctx.value(ref))
        if items is None:
            items = []  # the upstream was pruned or produced nothing: operate on nothing
        if not isinstance(items, list):
            raise FieldError(cid, "params.query", f"'{ref}' must be an array, got a {type_name(items)}")
        ctx.set_input(ref, items)
        n, strict = _coerce_n(p.n), as_bool(p.strict)
        try:
            if op == "nth":
                result = nth(items, n, strict)
            elif op == "head":
                result = head(items, n, strict)
            elif op == "tail":
                result = tail(items, n, strict)
            elif op == "filter":
                result = await self._filter(ctx, items)
            elif op == "sort":
                descending = str(p.sort_method or "asc").strip().lower() == "desc"
                result = sort_items(items, descending, parse_sort_by(p.sort_by))
            else:
                result = drop_duplicates(items)
        except StrictRangeError as exc:
            raise FieldError(cid, "params.n", str(exc)) from None
        ctx.set_output("result", result)
        ctx.set_output("first", result[0] if result else None)
        ctx.set_output("last", result[-1] if result else None)

    async def _filter(self, ctx: NodeContext, items: list[Any]) -> list[Any]:
        spec = self.params.filter or Filter()  # the model requires it for "filter"
        operator = spec.operator
        value = spec.value
        # {refs} in the value are expanded (RAGFlow compares the raw text).
        value = await ctx.render(value) if isinstance(value, str) else _norm(value)
        return filter_items(items, operator, value)
