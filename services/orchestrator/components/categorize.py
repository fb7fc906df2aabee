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
from typing import Any, Iterator

from services.llm_gateway.models import Message

from ..variables import StreamValue, to_text
from . import _llm
from .base import Component, NodeContext, Route, ValidationIssue, id_list, register


def _targets(spec: Any) -> list[str]:
    to = spec.get("to") if isinstance(spec, dict) else None
    if isinstance(to, str):
        return [to] if to else []
    return [t for t in to if isinstance(t, str) and t] if isinstance(to, list) else []


def system_prompt(categories: dict[str, Any]) -> str:
    examples = []
    for name, spec in categories.items():
        for line in (spec.get("examples") or []) if isinstance(spec, dict) else []:
            if isinstance(line, str) and line:
                examples.append(f'USER: "{re.sub(chr(10), "    ", line)}" → {name}')
    descriptions = [f"\n------\nCategory: {name}\nDescription: {spec['description']}"
                    for name, spec in categories.items() if isinstance(spec, dict) and spec.get("description")]
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


def choose(answer: str, categories: dict[str, Any]) -> str:
    low = answer.lower()
    counts = {name: low.count(name.strip().lower()) for name in categories if name.strip()}
    best = max(counts.values(), default=0)
    if best == 0:
        return list(categories)[-1]
    return next(name for name, n in counts.items() if n == best)


@register
class Categorize(Component):
    component_name = "Categorize"

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        issues = _llm.check_llm_params(cpn_id, params)
        cats = params.get("category_description")
        if not isinstance(cats, dict) or not cats:
            return issues + [ValidationIssue(cpn_id, "params.category_description",
                                             "needs at least one category {name: {description, examples, to}}")]
        for name, spec in cats.items():
            if not str(name).strip():
                issues.append(ValidationIssue(cpn_id, "params.category_description", "a category name is empty"))
            elif not _targets(spec):
                issues.append(ValidationIssue(cpn_id, f"params.category_description.{name}.to",
                                              "is empty: each category needs the components it routes to"))
        query = params.get("query", "sys.query")
        if not isinstance(query, str):
            issues.append(ValidationIssue(cpn_id, "params.query", "must be a reference such as sys.query"))
        return issues

    @classmethod
    def routes(cls, params: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        cats = params.get("category_description")
        if isinstance(cats, dict):
            for cat, spec in cats.items():
                if isinstance(spec, dict):
                    for j, t in enumerate(id_list(spec.get("to"))):
                        yield f"params.category_description.{cat}.to[{j}]", t

    def thoughts(self, ctx: NodeContext) -> str:
        names = ",".join(f"`{c}`" for c in (self.params.get("category_description") or {}))
        return f"Which should it falls into {names}? ..."

    async def run(self, ctx: NodeContext) -> Route:
        categories: dict[str, Any] = self.params["category_description"]
        key = self.params.get("query") or "sys.query"
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
