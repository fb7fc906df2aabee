"""What every web tool gets from its base (components/tools/_web.py): params that read like a reference but name
no component of the canvas are text (an email address), and RAGFlow's thoughts() texts."""
from __future__ import annotations

from services.orchestrator.components import get_class
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest, SessionState
from tests.support.fake_web_api import allow_local


def canvas_ctx(component_id: str, *, query: str = "", outputs: dict | None = None) -> NodeContext:
    """A node's context in a canvas holding `begin`, `Agent:a` and the node itself."""
    ctx = NodeContext.for_test({}, services=Services(settings=allow_local()), component_id=component_id,
                               component_name=component_id.split(":")[0], globals_={"sys.query": query},
                               request=RunRequest(run_id="run-test", query=query), outputs=outputs,
                               known={"begin", "Agent:a", component_id})
    ctx.env.state = SessionState.fresh()
    return ctx


async def test_an_address_is_text_and_a_reference_to_a_component_of_the_canvas_is_resolved(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_WIKIPEDIA_BASE_URL", web_api.url)
    web_api.route("GET", "/w/api.php", {"query": {"pages": {}}})
    wikipedia = get_class("Wikipedia")
    await wikipedia("Wikipedia:w", {"query": "ann@mail.example"}).run(canvas_ctx("Wikipedia:w"))
    await wikipedia("Wikipedia:w", {"query": "Agent:a@content"}).run(
        canvas_ctx("Wikipedia:w", outputs={"Agent:a": {"content": "moutai margins"}}))
    asked = [s.query["gsrsearch"] for s in web_api.seen("/w/api.php")]
    assert asked == ["ann@mail.example", "moutai margins"]


def test_thoughts_are_ragflows_texts_written_once():
    ctx = canvas_ctx("X:x", query="solid state")
    for name, params in (("TavilySearch", {"query": "sys.query"}), ("Google", {"q": "sys.query"}),
                         ("Wikipedia", {"query": "sys.query"})):
        assert get_class(name)(f"{name}:x", params).thoughts(ctx) == (
            "\nKeywords: solid state\nLooking for the most relevant articles.\n")
    assert get_class("YahooFinance")("Y:x", {"stock_code": "NVDA"}).thoughts(ctx) == (
        "Pulling live financial data for `NVDA`.")
    assert get_class("PubMed")("P:x", {"query": "sys.query"}).thoughts(ctx) == (
        "Looking for scholarly papers on `solid state`,\u201d prioritising reputable sources.")
    assert get_class("ArXiv")("A:x", {}).thoughts(ctx).startswith("\nKeywords: -_-!")
