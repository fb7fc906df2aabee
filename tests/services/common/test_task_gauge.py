"""trellis_asyncio_tasks: the tasks of the process's loop at each scrape, so a soak can see a leak of tasks."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from services.common.metrics import count_tasks


def tasks_gauge() -> float:
    return REGISTRY.get_sample_value("trellis_asyncio_tasks")


async def test_the_gauge_counts_the_loops_tasks_and_comes_back_when_they_end() -> None:
    count_tasks(asyncio.get_running_loop())
    before = tasks_gauge()
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(5)]
    assert tasks_gauge() == before + 5
    release.set()
    await asyncio.gather(*waiting)
    assert tasks_gauge() == before


async def test_a_scrape_from_another_thread_reads_the_same_count() -> None:
    count_tasks(asyncio.get_running_loop())
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(3)]
    here = tasks_gauge()
    assert await asyncio.to_thread(tasks_gauge) == here  # to_thread awaits a future, not a new task
    release.set()
    await asyncio.gather(*waiting)
