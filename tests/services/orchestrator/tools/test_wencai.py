"""WenCai against a local server speaking iwencai's API as pywencai calls it (get-robot-data, then getDataList
for a stock screen). Failures (HTTP errors, retries, timeouts, SSRF) are in test_tool_failures.py."""
from __future__ import annotations

import json
import sys

import pytest

from services.orchestrator.components import get_class
from tests.support.fake_web_api import Respond
from tests.support.tool_calls import agent_call, node_run, tool_schema

FOOTER = "/gateway/urp/v7/landing/getDataList?query=pe%3C20&urp_sort_way=desc&urp_sort_index=pe&source=Ths_iwencai_Xuangu"
ROWS = [{"code": "600519", "股票简称": "贵州茅台", "市盈率(pe)": 18.5},
        {"code": "000858", "股票简称": "五粮液", "市盈率(pe)": 15.25, "market": "SZ"}]


def robot_data(components: list[dict]) -> dict:
    """get-robot-data's answer: the components as JSON text, where pywencai's convert() reads them."""
    return {"status_code": 0, "data": {"answer": [{"txt": [{"content": json.dumps({"components": components})}]}]}}


SCREEN = robot_data([{"show_type": "xuangu_tableV1", "cid": "comp-7", "puuid": "uuid-9",
                      "data": {"meta": {"extra": {"condition": "[{\"indexName\":\"pe\"}]", "row_count": 2}}},
                      "config": {"other_info": {"footer_info": {"url": FOOTER}}}}])
DETAIL = robot_data([
    {"show_type": "txt1", "title_config": {"data": {"h1": "公司简介"}}, "data": {"content": "Moutai makes baijiu."}},
    {"show_type": "common", "config": {"title": "财务"}, "data": {"datas": [{"year": 2025, "revenue": 1741}]}},
    {"show_type": "common", "config": {"title": "logo"}, "data": {"datas": [{"image_url": "https://x/1.png"}]}},
    {"show_type": "common", "config": {"title": "概况"}, "data": {"市值": "2.1万亿", "meta": {"a": 1}}},
    {"show_type": "container", "config": {"title": "板块", "children": ["u1"]}},
    {"show_type": "txt2", "uuid": "u1", "data": {"content": "白酒"}},
])


@pytest.fixture
def wencai(web_api, monkeypatch):
    monkeypatch.setenv("TRELLIS_WENCAI_BASE_URL", web_api.url)
    monkeypatch.setenv("WENCAI_COOKIE", "v=session-1")
    monkeypatch.setenv("TRELLIS_WENCAI_TOKEN_COMMAND", f"{sys.executable} -c \"print('hexin-token-1')\"")
    web_api.route("POST", "/customized/chart/get-robot-data", SCREEN)
    web_api.route("POST", "/gateway/urp/v7/landing/getDataList", {"answer": {"components": [{"data": {"datas": ROWS}}]}})
    return web_api


async def test_a_screen_asks_for_the_condition_then_the_rows_and_the_model_reads_their_table(wencai):
    observation, error, _ = await agent_call("WenCai", {"top_n": 5, "query_type": "stock"}, {"query": "市盈率小于20"})
    assert error is None
    [robot] = wencai.seen("/customized/chart/get-robot-data")
    assert robot.json["question"] == "市盈率小于20" and robot.json["secondary_intent"] == "stock"
    assert robot.json["source"] == "Ths_iwencai_Xuangu" and robot.json["perpage"] == "10"
    assert robot.headers["hexin-v"] == "hexin-token-1" and robot.headers["Cookie"] == "v=session-1"
    [page] = wencai.seen("/gateway/urp/v7/landing/getDataList")
    assert page.form["condition"] == "[{\"indexName\":\"pe\"}]" and page.form["comp_id"] == "comp-7"
    assert page.form["uuid"] == "uuid-9" and page.form["perpage"] == "5" and page.form["page"] == "1"
    assert page.form["urp_sort_index"] == "pe" and page.form["query"] == "市盈率小于20"  # the footer URL's params
    assert page.headers["hexin-v"] == "hexin-token-1"
    lines = observation.splitlines()
    assert [c.strip() for c in lines[0].split("|")[1:-1]] == ["", "code", "股票简称", "市盈率(pe)", "market"]
    assert lines[2].split("|")[1].strip() == "0" and "贵州茅台" in lines[2] and "nan" in lines[2]
    assert "五粮液" in lines[3] and "SZ" in lines[3]


async def test_as_a_node_the_report_is_its_output_and_a_detail_answer_is_titled_parts(wencai):
    wencai.route("POST", "/customized/chart/get-robot-data", DETAIL)
    ctx = await node_run("WenCai", {"query": "sys.query", "query_type": "fund", "user_agent": "UA/1"}, query="茅台")
    report = ctx.outputs["report"]
    assert ctx.outputs["formalized_content"] == report and ctx.inputs["query"] == "茅台"
    [robot] = wencai.seen("/customized/chart/get-robot-data")
    assert robot.json["secondary_intent"] == "fund" and robot.headers["User-Agent"] == "UA/1"
    assert not wencai.seen("/gateway/urp/v7/landing/getDataList")
    parts = report.split("\n\n")
    assert parts[0] == "公司简介\nMoutai makes baijiu."
    header = [c.strip() for c in parts[1].splitlines()[0].split("|")[1:-1]]
    assert header == ["", "year", "revenue"] and "1741" in parts[1]  # rows: a table without its title, as RAGFlow
    assert parts[2].startswith("|") and "txt2" in parts[2] and "白酒" in parts[2]  # the container: its children
    assert parts[3] == "txt2\n白酒"  # the child, also listed on its own (pywencai walks every component)
    assert "板块" not in report and "image_url" not in report and "2.1万亿" not in report  # meta, images: left out
    assert len(parts) == 4


async def test_what_the_model_sees_and_an_empty_query():
    schema = tool_schema("WenCai")
    assert schema.name == "iwencai_0" and schema.description.startswith("iwencai search: search platform")
    assert schema.parameters["required"] == ["query"]
    ctx = await node_run("WenCai", {"query": ""})
    assert ctx.outputs["report"] == ""
    issues = get_class("WenCai").check("WenCai:x", {"query_type": "crypto", "top_n": 0})
    assert sorted(i.field for i in issues) == ["params.query_type", "params.top_n"]


async def test_an_answer_without_components_says_a_token_is_wanted(wencai, monkeypatch):
    monkeypatch.delenv("TRELLIS_WENCAI_TOKEN_COMMAND")
    wencai.route("POST", "/customized/chart/get-robot-data", Respond(200, '{"status_code": -1, "status_msg": "denied"}'))
    observation, error, _ = await agent_call("WenCai", {}, {"query": "q"})
    assert observation == f"Error: {error}" and "no components" in error and "TRELLIS_WENCAI_TOKEN_COMMAND" in error
    assert "hexin-v" not in wencai.seen()[0].headers


async def test_a_failing_token_command_is_an_error_naming_it(wencai, monkeypatch):
    monkeypatch.setenv("TRELLIS_WENCAI_TOKEN_COMMAND", f"{sys.executable} -c \"raise SystemExit('no node')\"")
    observation, error, _ = await agent_call("WenCai", {}, {"query": "q"})
    assert observation.startswith("Error: ") and "TRELLIS_WENCAI_TOKEN_COMMAND" in error and "no node" in error
    assert not wencai.seen()
