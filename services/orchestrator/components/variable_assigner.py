"""VariableAssigner: writes into `env.*` variables or other components' outputs.

Params: `variables=[{"variable": "<ref>", "operator": "...", "parameter": ...}]`, applied in order.
Operators, as in RAGFlow's `agent/component/variable_assigner.py`:

- `overwrite`: the value of the reference in `parameter`;
- `clear`: the type's zero value ([] "" {} False 0 0.0, else None);
- `set`: `parameter` as a literal; for a string (or unset) variable, `{refs}` inside it are expanded;
- `append` / `extend`: add one item / a list of items (`parameter` is a reference or a literal);
- `remove_first` / `remove_last`: drop an item from a list;
- `+=`, `-=`, `*=`, `/=`: arithmetic on numbers (booleans are not numbers).

Type mismatches do not fail the run: like RAGFlow, the variable receives an error string
(`"ERROR:VARIABLE_NOT_LIST"`, ...), which downstream Switch conditions can test. A missing or unknown
operator, or a missing parameter, is a configuration error and fails the node.

Differences from RAGFlow, all lenient: a literal (non-reference) `parameter` of `overwrite`, `append`
or `extend` is used as is (RAGFlow would read it as a global name and get None); a numeric string
parameter of an arithmetic operator is parsed ("1" += works); lists are never mutated in place.
"""
from __future__ import annotations

import copy
import logging
import numbers
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from services.orchestrator.components._fields import FieldError, decode_json_container, resolve_operand
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, OrEmpty, Params, validator
from services.orchestrator.engine.variables import VariableError, parse_ref, to_jsonable

log = logging.getLogger(__name__)

OPERATORS = ("overwrite", "clear", "set", "append", "extend", "remove_first", "remove_last",
             "+=", "-=", "*=", "/=")
PARAMETERLESS = frozenset({"clear", "remove_first", "remove_last"})

VARIABLE_NOT_LIST = "ERROR:VARIABLE_NOT_LIST"
PARAMETER_NOT_LIST = "ERROR:PARAMETER_NOT_LIST"
PARAMETER_NOT_LIST_ELEMENT_TYPE = "ERROR:PARAMETER_NOT_LIST_ELEMENT_TYPE"
NOT_NUMBER = "ERROR:VARIABLE_NOT_NUMBER or PARAMETER_NOT_NUMBER"
DIVIDE_BY_ZERO = "ERROR:DIVIDE_BY_ZERO"


# ------------------------------------------------------------------------------------ pure operators
def clear_value(current: Any) -> Any:
    # bool before int: bool is an int subclass.
    for kind, zero in ((list, []), (str, ""), (dict, {}), (bool, False), (int, 0), (float, 0.0)):
        if isinstance(current, kind):
            return zero
    return None


def append_value(current: Any, item: Any) -> Any:
    if current is None:
        current = []
    if not isinstance(current, list):
        return VARIABLE_NOT_LIST
    if current and not isinstance(item, type(current[0])):
        return PARAMETER_NOT_LIST_ELEMENT_TYPE
    return [*current, item]


def extend_value(current: Any, items: Any) -> Any:
    if current is None:
        current = []
    if not isinstance(current, list):
        return VARIABLE_NOT_LIST
    if not isinstance(items, list):
        return PARAMETER_NOT_LIST
    if current and items and not isinstance(items[0], type(current[0])):
        return PARAMETER_NOT_LIST_ELEMENT_TYPE
    return [*current, *items]


def remove_first(current: Any) -> Any:
    if not isinstance(current, list):
        return VARIABLE_NOT_LIST
    return current[1:]


def remove_last(current: Any) -> Any:
    if not isinstance(current, list):
        return VARIABLE_NOT_LIST
    return current[:-1]


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _numeric_parameter(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        for parse in (int, float):
            try:
                return parse(text)
            except ValueError:
                continue
    return value


def arithmetic(operator: str, current: Any, parameter: Any) -> Any:
    parameter = _numeric_parameter(parameter)
    if not (is_number(current) and is_number(parameter)):
        return NOT_NUMBER
    if operator == "+=":
        return current + parameter
    if operator == "-=":
        return current - parameter
    if operator == "*=":
        return current * parameter
    if parameter == 0:
        return DIVIDE_BY_ZERO
    return current / parameter


def _set_in(container: Any, path: tuple[str, ...], value: Any) -> Any:
    """`container` with `value` written at `path` (dicts created on the way)."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(container, list):
        try:
            index = int(key)
            container[index] = _set_in(container[index], rest, value)
            return container
        except (ValueError, IndexError):
            pass  # not an index into this list: replace it by an object, as RAGFlow does
    if not isinstance(container, dict):
        container = {}
    container[key] = _set_in(container.get(key), rest, value)
    return container


# ------------------------------------------------------------------------------------ params
def _variable(variable: Any) -> str:
    if not variable or not isinstance(variable, str):
        raise ValueError("is required")
    if parse_ref(variable) is None:
        raise ValueError(f"'{variable}' is not a variable reference (env.x, sys.x or cpn@var)")
    return variable


def _operator(operator: Any) -> str:
    if not operator:
        raise ValueError("is required")
    if operator not in OPERATORS:
        raise ValueError(f"unsupported operator '{operator}' (supported: {', '.join(OPERATORS)})")
    return operator


class Assignment(Entry):
    variable: Annotated[Any, validator(_variable), Field(validate_default=True)] = None
    operator: Annotated[Any, validator(_operator), Field(validate_default=True)] = None
    parameter: Any = Field(None, validate_default=True)

    @field_validator("parameter")
    @classmethod
    def _given(cls, parameter: Any, info: ValidationInfo) -> Any:
        # 0, "" and False are valid parameters: only a missing one is an error.
        operator = info.data.get("operator")
        if parameter is None and operator and operator not in PARAMETERLESS:
            raise ValueError(f"is required by operator '{operator}'")
        return parameter


class VariableAssignerParams(Params):
    # applied in order; "" = none
    variables: OrEmpty(list[Assignment] | None) = None  # type: ignore[valid-type]


# ------------------------------------------------------------------------------------ component
@register
class VariableAssigner(Component):
    component_name = "VariableAssigner"
    params_model = VariableAssignerParams
    params: VariableAssignerParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "Assign variables from canvas."

    async def run(self, ctx: NodeContext) -> None:
        for i, item in enumerate(self.params.variables or ()):
            target, operator = item.variable, item.operator
            try:
                current = await ctx.value(target)
                new = await self._operate(ctx, current, operator, item.parameter)
                if isinstance(new, str) and new in _ERRORS:
                    log.info("VariableAssigner %s: %s %s -> %s", ctx.component_id, target, operator, new)
                await _write(ctx, target, new)
            except VariableError as exc:
                # Unknown component in `variable` or in a referenced `parameter`.
                raise FieldError(ctx.component_id, f"params.variables[{i}].variable", str(exc)) from None
            ctx.set_input(target, to_jsonable(new))

    async def _operate(self, ctx: NodeContext, current: Any, operator: str, parameter: Any) -> Any:
        if operator == "overwrite":
            return copy.deepcopy(await resolve_operand(ctx, parameter))
        if operator == "clear":
            return clear_value(current)
        if operator == "set":
            if (current is None or isinstance(current, str)) and isinstance(parameter, str):
                return await ctx.render(parameter)
            return copy.deepcopy(parameter)
        if operator == "append":
            return append_value(current, copy.deepcopy(await resolve_operand(ctx, parameter)))
        if operator == "extend":
            items = decode_json_container(await resolve_operand(ctx, parameter))
            return extend_value(current, copy.deepcopy(items))
        if operator == "remove_first":
            return remove_first(current)
        if operator == "remove_last":
            return remove_last(current)
        return arithmetic(operator, current, await resolve_operand(ctx, parameter))


_ERRORS = frozenset({VARIABLE_NOT_LIST, PARAMETER_NOT_LIST, PARAMETER_NOT_LIST_ELEMENT_TYPE,
                     NOT_NUMBER, DIVIDE_BY_ZERO})


async def _write(ctx: NodeContext, ref: str, value: Any) -> None:
    parsed = parse_ref(ref)
    if parsed is not None and parsed[0] == "cpn" and len(parsed[2]) > 1:
        # cpn@var.a.b: rewrite the root output with the nested value replaced (RAGFlow
        # set_variable_value); a copy, so readers holding the old root never see it change.
        cpn_id, path = parsed[1], parsed[2]
        root_ref = f"{cpn_id}@{path[0]}"
        root = copy.deepcopy(decode_json_container(await ctx.value(root_ref)))
        ctx.assign(root_ref, _set_in(root, path[1:], value))
        return
    ctx.assign(ref, value)
