"""What a user of the RAGFlow Python SDK writes, from agents to retrieval; run as a script by
tests/gateway/test_ragflow_sdk.py with whichever ragflow-sdk is first on sys.path (0.22.1 or 0.27.3).

    python sdk_flow.py BASE_URL API_KEY      -> one JSON object of what the SDK saw, on stdout
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time

import requests
from ragflow_sdk import RAGFlow
from ragflow_sdk.modules.agent import Agent

DSL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {"prologue": "Hello there!"}},
              "downstream": ["Message:Out"], "upstream": []},
    "Message:Out": {"obj": {"component_name": "Message", "params": {"content": ["You said: {sys.query}"]}},
                    "downstream": [], "upstream": ["begin"]}},
    "history": [], "path": [], "retrieval": []}


def _error(call) -> str:
    try:
        call()
    except Exception as exc:  # the SDK raises a bare Exception(message) or fails reading a shape
        return f"{type(exc).__name__}: {exc}"
    return ""


def agents(rag: RAGFlow, base_url: str, key: str, version: str) -> dict:
    out: dict = {}
    rag.create_agent(title="SDK agent", dsl=DSL, description="made by the SDK")
    if version.startswith("0.22"):
        # 0.22's list_agents iterates a bare list; today's RAGFlow answers {"canvas": [...], "total": N}.
        out["list_agents_error"] = _error(rag.list_agents)
        listed = requests.get(f"{base_url}/api/v1/agents", params={"title": "SDK agent"},
                              headers={"Authorization": f"Bearer {key}"}).json()["data"]["canvas"]
        agent = Agent(rag, listed[0])
    else:
        agent = [a for a in rag.list_agents() if a.title == "SDK agent"][0]
        agent = rag.get_agent(agent.id)
    rag.update_agent(agent.id, title="SDK agent renamed", description="renamed by the SDK")
    out["title_after_update"] = requests.get(f"{base_url}/api/v1/agents/{agent.id}",
                                             headers={"Authorization": f"Bearer {key}"}).json()["data"]["title"]
    session = agent.create_session()
    out["prologue"] = session.message[0]["content"]
    out["answer"] = [m.content for m in session.ask("ping", stream=False)]
    out["deltas"] = [m.content for m in session.ask("pong", stream=True)]
    for _ in range(50):  # the turn is stored as the run ends, which may be just after the stream's last frame
        listed = agent.list_sessions()
        if len(listed) == 1 and len(listed[0].messages) >= 5:
            break
        time.sleep(0.1)
    out["listed_sessions"] = [s.id == session.id for s in listed]
    out["history"] = [m["content"] for m in listed[0].messages]
    agent.delete_sessions(ids=[session.id])
    out["sessions_after_delete"] = len(agent.list_sessions())
    rag.delete_agent(agent.id)
    out["delete_again_error"] = _error(lambda: rag.delete_agent(agent.id))
    return out


def datasets(rag: RAGFlow) -> dict:
    out: dict = {}
    ds = rag.create_dataset(name="sdk-kb", embedding_model="bow@Scripted")
    out["chunk_method"], out["chunk_token_num"] = ds.chunk_method, ds.parser_config.chunk_token_num
    ds.update({"name": "sdk-kb-renamed", "description": "radiators", "pagerank": 3, "chunk_method": "qa"})
    out["dataset_update"] = [ds.name, ds.description, ds.pagerank, ds.chunk_method]
    out["listed_after_update"] = [d.name for d in rag.list_datasets(id=ds.id)]
    out["dataset_update_error"] = _error(lambda: ds.update({"pagerank": 101}))
    if hasattr(ds, "update_auto_metadata"):  # 0.27's SDK
        ds.update_auto_metadata(metadata=[{"key": "author", "type": "string"}])
        out["auto_metadata"] = [f["key"] for f in ds.get_auto_metadata()["metadata"]]
    docs = ds.upload_documents([{"display_name": "boiler.md", "blob": b"# Boiler\n\nBleed the radiator valve every autumn."},
                                {"display_name": "boiler.md", "blob": b"# Boiler\n\nA second copy."}])
    out["uploaded"] = [d.name for d in docs]
    out["parsed"] = [run for _, run, _, _ in ds.parse_documents([d.id for d in docs])]
    out["listed_documents"] = sorted(d.name for d in ds.list_documents())
    doc = ds.list_documents(name="boiler.md")[0]
    out["downloaded"] = doc.download().decode()
    out["chunks"] = [c.content for c in doc.list_chunks()]
    added = doc.add_chunk(content="The warranty lasts five years.")
    out["chunks_after_add"] = len(doc.list_chunks())
    hits = rag.retrieve(dataset_ids=[ds.id], question="warranty years", similarity_threshold=0.0)
    out["retrieved_first"] = hits[0].content
    out["retrieved_document"] = hits[0].document_name
    added.update({"content": "The warranty lasts ten years."})
    out["chunk_after_update"] = doc.list_chunks(id=added.id)[0].content
    added.update({"available": False})
    out["retrieved_unavailable"] = [h.content for h in rag.retrieve(dataset_ids=[ds.id], question="warranty ten years",
                                                                     similarity_threshold=0.0)]
    doc.delete_chunks(ids=[added.id])
    out["chunks_after_delete"] = len(doc.list_chunks())
    ds.delete_documents(ids=[docs[1].id])
    out["documents_after_delete"] = [d.name for d in ds.list_documents()]
    doc.update({"name": "boiler-guide.md", "meta_fields": {"lang": "en"}})
    out["document_update"] = [doc.name, getattr(doc.meta_fields, "lang", None)]
    doc.update({"enabled": 0})
    out["retrieved_disabled"] = len(rag.retrieve(dataset_ids=[ds.id], question="radiator valve", similarity_threshold=0.0))
    out["document_update_error"] = _error(lambda: doc.update({"name": "boiler-guide.pdf"}))
    rag.delete_datasets(ids=[ds.id])
    out["datasets_after_delete"] = len(rag.list_datasets())
    return out


def main() -> None:
    base_url, key = sys.argv[1], sys.argv[2]
    version = importlib.metadata.version("ragflow-sdk")
    rag = RAGFlow(api_key=key, base_url=base_url)
    result = {"version": version, **agents(rag, base_url, key, version), **datasets(rag),
              "bad_key_error": _error(RAGFlow(api_key="wrong", base_url=base_url).list_datasets)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
