"""`python -m services.retrieval` as a real subprocess: serves health and reflection, keeps its data, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb
from trellis.retrieval.v1 import retrieval_service_pb2_grpc as rr_grpc

from tests.support.net import free_port, health_status, reflected_services
from tests.support.retrieval import embedding_gateway

ROOT = Path(__file__).resolve().parents[3]
SERVICE = "trellis.retrieval.v1.RetrievalService"


async def _serving(addr: str, proc: subprocess.Popen) -> None:
    async with grpc.aio.insecure_channel(addr) as ch:
        for _ in range(300):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
            try:
                if await health_status(ch, SERVICE) == "SERVING":
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("retrieval never became SERVING")


async def test_main_serves_and_stops_cleanly(tmp_path):
    async with embedding_gateway() as llm:
        port = free_port()
        env = {**os.environ, "TRELLIS_RETRIEVAL_PORT": str(port), "TRELLIS_RETRIEVAL_METRICS_PORT": "0",
               "TRELLIS_DATA_DIR": str(tmp_path), "TRELLIS_LLM_GATEWAY_ADDR": llm, "TRELLIS_DRAIN_S": "0"}
        proc = subprocess.Popen([sys.executable, "-m", "services.retrieval"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            addr = f"127.0.0.1:{port}"
            await _serving(addr, proc)
            async with grpc.aio.insecure_channel(addr) as ch:
                assert SERVICE in await reflected_services(ch)
                stub = rr_grpc.RetrievalServiceStub(ch)
                ds = (await stub.CreateDataset(rr_pb.CreateDatasetRequest(tenant_id="t", name="kb", embedding_model="bow@Scripted"), timeout=10)).dataset
                doc = (await stub.IngestDocument(rr_pb.IngestDocumentRequest(tenant_id="t", dataset_id=ds.id, name="a.txt",
                                                                             content=b"Herons wade in shallow water."), timeout=30)).document
                assert doc.status == rr_pb.DOCUMENT_STATUS_DONE
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert (tmp_path / "retrieval.sqlite3").exists()  # the embedded backend's one database, in the data dir
