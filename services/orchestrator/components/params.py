"""Params: the pydantic model a component declares for its DSL params, checked once per compiled plan.

    class SwitchParams(Params):
        conditions: list[Condition] = Field(min_length=1)
        end_cpn_ids: IdList = Field(min_length=1)

    @register
    class Switch(Component):
        component_name = "Switch"
        params_model = SwitchParams
        params: SwitchParams                 # what `self.params` is: typed attributes

RAGFlow accepts any key in params (UI state, legacy keys), so every model allows extra keys and keeps
them (`model_extra`); the canvas keeps the params as they were loaded, so exporting a canvas gives back
what was loaded. The validator parses each component's params when the plan is compiled
(`parse_params`); a pydantic error becomes one `ValidationIssue` per problem, naming the component, its
type and the field path (`Switch:S (Switch): params.conditions[0].items[1].operator: ...`).

Fields whose value may be a variable reference (`{sys.query}`, `begin@n`) where a number or a flag is
meant keep the reference as text; the component resolves it when it runs, as RAGFlow does. The field
types below say which: `Ref` (a reference only), `Number(...)` (a number, or a reference with
`ref=True`). Validators read `info.context["require_available"]` (False when a canvas is only stored).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Callable

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    field_validator,
)
from pydantic_core import PydanticCustomError

from services.orchestrator.engine.dsl.issues import ValidationIssue
from services.orchestrator.engine.variables import is_ref

if TYPE_CHECKING:
    from services.orchestrator.components.base import Component

__all__ = ["Entry", "IdList", "Number", "OptionalRef", "OrEmpty", "Params", "ParamsInvalid", "Ref", "Required", "StrList",
           "TextOr", "as_issues", "lenient_params", "parse_params", "problem", "validator"]


def problem(message: str) -> PydanticCustomError:
    """An error whose message is shown as written (a plain ValueError gets pydantic's "Value error, ")."""
    return PydanticCustomError("params", message)


def _lenient(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("lenient"))


def validator(fn: Callable[[Any], Any]) -> PlainValidator:
    """A field type's whole validation in one function: `fn(value)` returns the value or raises ValueError
    with the message to show (no union members in the error path, no silent coercion)."""
    def run(value: Any, info: ValidationInfo) -> Any:
        try:
            return fn(value)
        except (ValueError, TypeError, OverflowError) as exc:
            if _lenient(info):
                return value
            raise problem(str(exc)) from None
    return PlainValidator(run)


def _ref(value: Any) -> str:
    if not is_ref(value):
        raise ValueError(f"must be a variable reference like 'cpn@var', not {value!r}")
    return value


def _numeric(value: Any, *, ge: float | None, integer: bool, ref: bool, flag: bool) -> Any:
    """The value unchanged when it is a number (or a numeric string: RAGFlow's forms save some as text,
    and the component converts them when it runs), or a reference with `ref`."""
    if ref and isinstance(value, str) and is_ref(value.strip()):
        return value
    if isinstance(value, bool) and not flag:
        raise ValueError(f"must be a number, not {value!r}")
    try:
        number = float(value.strip()) if isinstance(value, str) and value.strip().isascii() else float(value)
    except (TypeError, ValueError, AttributeError):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"must be {kind}{' or a variable reference' if ref else ''}, not {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, not {value!r}")
    if integer and not number.is_integer():
        raise ValueError(f"must be an integer, not {value!r}")
    if ge is not None and number < ge:
        raise ValueError(f"must be {'an integer' if integer else 'a number'} >= {ge:g}, not {value!r}")
    return value


def Number(*, ge: float | None = None, integer: bool = False, ref: bool = False, text: bool = True,  # noqa: N802
           blank: bool = False) -> Any:
    """A number field kept as given: `ge` the minimum, `integer` whole numbers only, `ref` a variable
    reference allowed, `text` a numeric string allowed ("5", as RAGFlow's forms save some), `blank` ""
    allowed (an empty form field). None is always allowed (not given)."""
    def check(value: Any) -> Any:
        if value is None or (blank and value == ""):
            return value
        if isinstance(value, str) and not text and not (ref and is_ref(value.strip())):
            raise ValueError(f"must be a number, not {value!r}")
        return _numeric(value, ge=ge, integer=integer, ref=ref, flag=False)
    return Annotated[Any, validator(check)]


def _optional_ref(value: Any) -> Any:
    return value if value in (None, "") else _ref(value)


def Required(tp: Any, message: str) -> Any:  # noqa: N802
    """`tp`, which must be given and not empty: `message` otherwise (assign `= None` as the default)."""
    def check(value: Any, info: ValidationInfo) -> Any:
        if (value is None or value == "" or value == [] or value == {}) and not _lenient(info):
            raise problem(message)
        return value
    return Annotated[tp, AfterValidator(check), Field(validate_default=True)]


def _id_list(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(f"must be a component id or a list of them, not {value!r}")


def _str_list(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(f"must be a list of strings, not {value!r}")


def TextOr(tp: Any, *, only_refs: bool = False) -> Any:  # noqa: N802
    """`tp`, or a string kept as given (`only_refs`: a variable reference only): the string form is taken
    first, so errors in the `tp` form keep their plain path (no union member in it)."""
    def wrap(value: Any, handler: Any) -> Any:
        if isinstance(value, str) and (not only_refs or is_ref(value.strip())):
            return value
        return handler(value)
    return Annotated[tp, WrapValidator(wrap)]


def OrEmpty(tp: Any) -> Any:  # noqa: N802
    """`tp`, or "" kept as given (RAGFlow's forms save an empty list field as "")."""
    return Annotated[tp, WrapValidator(lambda value, handler: value if value == "" else handler(value))]


Ref = Annotated[str, validator(_ref)]  # a bare variable reference: "cpn@var", "sys.query", "{begin@x}"
OptionalRef = Annotated[Any, validator(_optional_ref)]  # a reference, or None / "" (nothing to read)
IdList = Annotated[Any, validator(_id_list)]  # one component id or a list of them (`to`, `exception_goto`)
StrList = Annotated[list[str], validator(_str_list)]


class Entry(BaseModel):
    """A part of params (a Switch condition, an Agent's tool entry...): declared fields typed, every other
    key kept as given."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, arbitrary_types_allowed=True,
                              protected_namespaces=())

    def given(self, key: str, default: Any = None) -> Any:
        """The value of `key` as loaded (a declared field or an extra key), `default` when it was not given
        (a declared field's attribute holds its default then)."""
        if key in type(self).model_fields:
            return getattr(self, key) if key in self.model_fields_set else default
        extra = self.__pydantic_extra__
        return extra.get(key, default) if extra else default

    def as_dict(self) -> dict[str, Any]:
        """The keys as they were given (declared fields that were set, and every extra key)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class Params(Entry):
    """The params every component has: what the runner does when the component fails."""

    exception_method: Any = None
    exception_goto: IdList = Field(None, validate_default=True)  # checked against exception_method
    exception_default_value: Any = None
    max_retries: Number(ge=0, text=False) = None  # type: ignore[valid-type]
    delay_after_error: Number(ge=0, text=False) = None  # type: ignore[valid-type]

    @field_validator("exception_method")
    @classmethod
    def _method(cls, v: Any) -> Any:
        if v not in (None, "", "comment", "goto"):
            raise problem(f"must be 'comment', 'goto' or empty, not {v!r}")
        return v

    @field_validator("exception_goto")
    @classmethod
    def _goto(cls, v: Any, info: Any) -> Any:
        if info.data.get("exception_method") == "goto" and not v:
            raise problem("exception_method 'goto' needs targets")
        return v


class ParamsInvalid(ValueError):
    """Params that do not fit a component's model, outside validation (a tool called with bad arguments):
    the message names the component and each field."""

    def __init__(self, issues: list[ValidationIssue]) -> None:
        super().__init__("; ".join(str(i) for i in issues))
        self.issues = issues


def as_issues(exc: ValidationError, cpn_id: str, name: str, prefix: str = "params") -> list[ValidationIssue]:
    """One issue per pydantic error: the field path as `params.a[0].b`, the message as the model wrote it."""
    out = []
    for err in exc.errors(include_url=False):
        path = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        msg = err["msg"]
        if err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif err["type"] not in ("params", "missing") and "input" in err:
            msg = f"{msg}, not {_short(err['input'])}"
        out.append(ValidationIssue(cpn_id, path, msg, name))
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_params(cls: type[Component], cpn_id: str, params: Any, *,
                 require_available: bool = True) -> tuple[Params | None, list[ValidationIssue]]:
    """(the component's params model, []) or (None, the issues), never an exception."""
    name = cls.component_name
    if not isinstance(params, dict):
        return None, [ValidationIssue(cpn_id, "params", f"must be an object, not {_short(params)}", name)]
    try:
        return cls.params_model.model_validate(params, context={"require_available": require_available}), []
    except ValidationError as exc:
        return None, as_issues(exc, cpn_id, name)
    except Exception as exc:  # a validator that trips over a value it did not expect: still an issue
        return None, [ValidationIssue(cpn_id, "params", f"invalid params ({type(exc).__name__}: {exc})", name)]


def lenient_params(cls: type[Component], params: Any) -> Params | None:
    """The params model with the checks of `validator` and `Required` waived, for what validation still
    reads from params whose values did not pass (a Switch's branch targets next to a bad operator); None
    when even their shape is wrong."""
    try:
        return cls.params_model.model_validate(params, context={"lenient": True})
    except Exception:  # noqa: BLE001 - any failure means: nothing to read
        return None
