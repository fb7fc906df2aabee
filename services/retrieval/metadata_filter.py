"""Document metadata filters, as RAGFlow's `meta_filter` reads them (`common/metadata_utils.py`).

Each condition is `{key, operator, value}`; operators: "=", "≠", "contains", "not contains", "start with",
"end with", ">", "<", "≥", "≤", "empty", "not empty" (and the ASCII spellings "!=", ">=", "<="). Numbers
compare as numbers when both sides are numeric, else as text (case-insensitive). A list-valued field
matches when any of its items does. Conditions combine with "and" (default) or "or".
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from services.common.errors import InvalidArgument
from services.retrieval.models import Document, MetadataCondition

_ALIASES = {"!=": "≠", ">=": "≥", "<=": "≤", "==": "=", "is": "=", "is not": "≠", "not equal": "≠",
            "starts with": "start with", "ends with": "end with", "not_contains": "not contains",
            "not_empty": "not empty"}
OPERATORS = ("=", "≠", "contains", "not contains", "start with", "end with", ">", "<", "≥", "≤", "empty", "not empty")


def normalize_operator(op: str) -> str:
    o = " ".join(op.strip().lower().split())
    o = _ALIASES.get(o, o)
    if o not in OPERATORS:
        raise InvalidArgument(f"metadata_filter: unknown operator {op!r} (use one of {', '.join(OPERATORS)})")
    return o


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _one(actual: Any, op: str, expected: str) -> bool:
    a_num, e_num = _number(actual), _number(expected)
    if op in (">", "<", "≥", "≤"):
        if a_num is not None and e_num is not None:
            a, e = a_num, e_num
        else:
            a, e = str(actual).lower(), expected.lower()  # type: ignore[assignment]
        return {">": a > e, "<": a < e, "≥": a >= e, "≤": a <= e}[op]
    if op in ("=", "≠"):
        same = a_num == e_num if a_num is not None and e_num is not None else str(actual).lower() == expected.lower()
        return same if op == "=" else not same
    text, want = str(actual).lower(), expected.lower()
    return {"contains": want in text, "not contains": want not in text,
            "start with": text.startswith(want), "end with": text.endswith(want)}[op]


def matches(metadata: dict[str, Any], cond: MetadataCondition) -> bool:
    op = normalize_operator(cond.operator)
    value = metadata.get(cond.key)
    is_empty = value is None or value == "" or value == [] or value == {}
    if op in ("empty", "not empty"):
        return is_empty if op == "empty" else not is_empty
    if is_empty:
        return op in ("≠", "not contains")
    items = value if isinstance(value, list) else [value]
    if op in ("≠", "not contains"):
        return all(_one(v, op, cond.value) for v in items)
    return any(_one(v, op, cond.value) for v in items)


def filter_documents(docs: Iterable[Document], conditions: Sequence[MetadataCondition], logic: str = "and") -> set[str]:
    """Ids of the documents whose metadata satisfies the conditions."""
    combine = (logic or "and").strip().lower()
    if combine not in ("and", "or"):
        raise InvalidArgument(f"metadata_logic must be 'and' or 'or', got {logic!r}")
    for c in conditions:
        normalize_operator(c.operator)  # fail on a bad operator even when no document has the key
    pick = all if combine == "and" else any
    return {d.id for d in docs if pick(matches(d.metadata, c) for c in conditions)}
