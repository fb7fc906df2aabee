"""The whole HTTP surface fuzzed from the gateway's own /openapi.json with schemathesis, against the real stack
(orchestrator on the test Redis, retrieval on SQLite, scripted llm_gateway): every generated request must get
an answer in the time limit, never a 5xx, always with a status, content type and body the document declares;
for valid requests (schemathesis' positive mode) and invalid ones (negative mode) alike.

TRELLIS_FUZZ_EXAMPLES sets the examples per operation (default 12, derandomized so every run tries the same
cases); the test prints how many cases it tried.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import schemathesis
from schemathesis import GenerationMode
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import checks

EXAMPLES = int(os.environ.get("TRELLIS_FUZZ_EXAMPLES", "12"))
CALL_TIMEOUT_S = 20.0  # a request that takes longer counts as a hang


@schemathesis.check
def no_ragflow_server_error(ctx, response, case):
    """RAGFlow answers its errors with HTTP 200, so a server error hides in the body: code 500 or 100."""
    try:
        body = response.json()
    except Exception:  # a stream or a file: nothing to read here
        return
    if isinstance(body, dict) and body.get("code") in (100, 500) and "message" in body:
        raise AssertionError(f"server error in a RAGFlow body: {body['message']!r}")


CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance, no_ragflow_server_error]
# Not fuzzed: a document upload embeds every file it is given, too slow for the suite's budget (its rules are
# in tests/gateway/test_datasets_routes.py); /metrics is Prometheus' text format; /healthz answers 503 by
# design here, where no sandbox runs (tests/gateway/test_health_and_metrics.py).
SKIP = {("POST", "/api/v1/datasets/{dataset_id}/documents"), ("GET", "/metrics"), ("GET", "/healthz")}


@dataclass
class Tally:
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def _fuzz(document: dict, base_url: str, key: str) -> Tally:
    tally = Tally()
    schema = schemathesis.openapi.from_dict(document)
    http = requests.Session()
    operations = [result.ok() for result in schema.get_all_operations()]
    for op, mode in [(op, mode) for mode in GenerationMode for op in operations]:
        if (op.method.upper(), op.path) in SKIP:
            continue

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case: schemathesis.Case) -> None:
            tally.cases += 1
            try:
                response = case.call(base_url=base_url, session=http, headers={"Authorization": f"Bearer {key}"},
                                     timeout=CALL_TIMEOUT_S)
            except requests.Timeout:
                raise AssertionError(f"no answer in {CALL_TIMEOUT_S} s") from None
            case.validate_response(response, checks=CHECKS)

        try:
            run()
        except Unsatisfiable:  # negative mode, an operation without parameters or body: nothing to break
            continue
        except (Exception, BaseExceptionGroup) as exc:  # a report per failing operation; the others still run
            tally.failures.append(f"{op.method.upper()} {op.path} ({mode.value}): {str(exc).strip()[:1500]}")
    return tally


@pytest.mark.timeout(1800)  # the default run takes well under a minute; TRELLIS_FUZZ_EXAMPLES=200 takes long
async def test_every_route_answers_within_its_schema(live):
    document = await (await live.client.get("/openapi.json")).json()
    tally = await asyncio.to_thread(_fuzz, document, live.url, live.key_a)
    Path(os.environ.get("TRELLIS_FUZZ_REPORT", "/dev/null")).write_text("\n\n".join(tally.failures))
    print(f"schemathesis: {tally.cases} cases over {len(document['paths'])} paths, {len(tally.failures)} failing operations")
    assert tally.cases >= EXAMPLES * 40
    assert not tally.failures, "\n\n".join(tally.failures)



def _post_dsls(base_url: str, key: str) -> tuple[int, list[str]]:
    """Canvas-shaped documents through POST /api/v1/agents: the orchestrator's loader and validation answer
    101 (or 102 for a taken title), never a server error."""
    from hypothesis import strategies as st

    names = st.sampled_from(["Begin", "Message", "Agent", "Switch", "Iteration", "IterationItem", "Categorize", "Nope"])
    ids = st.sampled_from(["begin", "Message:M", "Agent:A", "Switch:S", "Iteration:I", "x"])
    values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                          | st.sampled_from(["{sys.query}", "{Agent:A@content}", "{x@y}", "{"]),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=8)
    entry = st.fixed_dictionaries({"obj": st.fixed_dictionaries({"component_name": names, "params": st.dictionaries(
        st.sampled_from(["prologue", "content", "llm_id", "items_ref", "conditions", "tools", "inputs"]), values, max_size=3)}),
        "downstream": st.lists(ids, max_size=2), "upstream": st.lists(ids, max_size=2)}) | values
    documents = st.fixed_dictionaries({"components": st.dictionaries(ids, entry, max_size=4)},
                                      optional={"path": values, "history": values, "globals": values, "variables": values})
    seen: list[str] = []
    http = requests.Session()

    @settings(max_examples=EXAMPLES * 8, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(dsl=documents, title=st.text(min_size=1, max_size=10))
    def post(dsl: dict, title: str) -> None:
        resp = http.post(f"{base_url}/api/v1/agents", json={"title": title, "dsl": dsl},
                         headers={"Authorization": f"Bearer {key}"}, timeout=CALL_TIMEOUT_S)
        body = resp.json()
        seen.append(str(body["code"]))
        assert resp.status_code == 200 and body["code"] in (0, 101, 102), body

    post()
    return len(seen), sorted(set(seen))


async def test_canvas_documents_over_http_are_created_or_refused_clearly(live):
    cases, codes = await asyncio.to_thread(_post_dsls, live.url, live.key_a)
    print(f"hypothesis over HTTP: {cases} canvas documents, answer codes {codes}")
    assert cases >= EXAMPLES * 8 and "101" in codes
