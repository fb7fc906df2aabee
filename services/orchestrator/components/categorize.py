"""Categorize: one model call classifies the query; the chosen category's `to` runs, the rest is pruned.

Params (RAGFlow `agent/component/categorize.py`): `category_description` ({name: {"description",
"examples": [str], "to": [ids]}}, required, each with a `to`), `query` (a bare reference, default
"sys.query"), `message_history_window_size` (1: the previous turn is shown with the query), plus the
LLM model params. The system prompt is RAGFlow's, built from the categories.
Match: each category name is counted (case-insensitive) in the answer and the most frequent wins,
ties to the first declared; when no name occurs, the LAST category is taken (RAGFlow's fallback: it
routes to the last category's `to`; it names the first category in `category_name`, which we do not
copy, so the name always matches the route). Names are matched without surrounding spaces
(a template declares "Negative review " with a trailing space).
Outputs: `category_name`, `_next` (the ids routed to). Run override: `llm_id`.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Iterator

from pydantic import AfterValidator

from services.clients.llm_models import Message
from services.orchestrator.components import _llm
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components.base import Component, NodeContext, Route, id_list, register
from services.orchestrator.components.params import Entry, IdList, Required, validator
from services.orchestrator.engine.variables import StreamValue, to_text


class Category(Entry):
    description: Any = None
    examples: Any = None  # [str]
    to: Required(IdList, "is empty: each category needs the components it routes to") = None  # type: ignore[valid-type]


def _names(categories: dict[str, Category]) -> dict[str, Category]:
    if any(not name.strip() for name in categories):
        raise ValueError("a category name is empty")
    return categories


def _query(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a reference such as sys.query")
    return value


class CategorizeParams(LlmParams):
    category_description: Required(  # type: ignore[valid-type]
        Annotated[dict[str, Category], AfterValidator(_names)],
        "needs at least one category {name: {description, examples, to}}") = None
    query: Annotated[Any, validator(_query)] = "sys.query"


def _targets(spec: Category) -> list[str]:
    return [t for t in id_list(spec.to) if t]


def system_prompt(categories: dict[str, Category]) -> str:
    examples = []
    for name, spec in categories.items():
        for line in spec.examples if isinstance(spec.examples, list) else []:
            if isinstance(line, str) and line:
                examples.append(f'USER: "{re.sub(chr(10), "    ", line)}" → {name}')
    descriptions = [f"\n------\nCategory: {name}\nDescription: {spec.description}"
                    for name, spec in categories.items() if spec.description]
    names = "\n - ".join(categories)
    described = "\n".join(descriptions)
    prompt = f"""
You are an advanced classification system that categorizes user questions into specific types. Analyze the input question and classify it into ONE of the following categories:
{names}

Here's description of each category:
 - {described}

---- Instructions ----
 - Consider both explicit mentions and implied context
 - Prioritize the most specific applicable category
 - Return only the category name without explanations
 - Use "Other" only when no other category fits

 """
    if examples:
        prompt += "\n---- Examples ----\n" + "\n".join(examples) + "\n"
    return prompt


def choose(answer: str, categories: dict[str, Category]) -> str:
    low = answer.lower()
    counts = {name: low.count(name.strip().lower()) for name in categories if name.strip()}
    best = max(counts.values(), default=0)
    if best == 0:
        return list(categories)[-1]
    return next(name for name, n in counts.items() if n == best)


@register
class Categorize(Component):
    component_name = "Categorize"
    params_model = CategorizeParams
    params: CategorizeParams

    @classmethod
    def routes(cls, params: CategorizeParams) -> Iterator[tuple[str, Any]]:
        for cat, spec in (params.category_description or {}).items():
            for j, t in enumerate(id_list(spec.to)):
                yield f"params.category_description.{cat}.to[{j}]", t

    def thoughts(self, ctx: NodeContext) -> str:
        names = ",".join(f"`{c}`" for c in self.params.category_description)
        return f"Which should it falls into {names}? ..."

    async def run(self, ctx: NodeContext) -> Route:
        categories = self.params.category_description
        key = self.params.query or "sys.query"
        value = await ctx.value(key) if ctx.is_ref(key) else await ctx.render(key)
        query = value.text if isinstance(value, StreamValue) else to_text(value)
        ctx.set_input(key, query)
        window = _llm.window_size(self.params, default=1)
        # RAGFlow shows the last `window` turns, the current query being the last message.
        msgs = _llm.history(ctx, window)[-(2 * window - 1):] if window > 0 else []
        msgs.append(Message("user", query))
        real = " | ".join(f'{m.role.upper()}: "{m.content.replace(chr(10), "")}"' for m in msgs)
        conf = _llm.ModelConf.of(ctx, self.params)
        answer = await _llm.complete(ctx, conf, [Message("system", system_prompt(categories)),
                                                 Message("user", f"\n---- Real Data ----\n{real} →\n")])
        name = choose(answer, categories)
        targets = _targets(categories[name])
        ctx.set_output("category_name", name)
        ctx.set_output("_next", targets)
        return Route(next=targets)
