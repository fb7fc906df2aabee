"""Every place the stack trades something for speed, each as one named policy chosen here (docs/speed-policies.md
says what each buys, measured by `make bench`).

Code that must stay obviously correct (durability, admission) takes a policy object and asks it; it never
decides on its own from the load it sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import env_str


@dataclass(frozen=True)
class JournalPolicy:
    """When a run's journal (event stream and checkpoint, store/journal.py) is written.

    `at_once`: every batch as soon as the previous write is done (what queued meanwhile goes together), so a
    crash loses at most the write in flight. `batched`: while at least `busy_runs` runs run on the replica, a
    new run writes nothing for `first_write_delay_s` (a short run then stores its whole journal with its end,
    in one round trip) and the writer writes at most once per `pace_s`; a crash then loses up to that much of
    each run's stream (its unfinished components run again), and a client rejoining sees events that late.
    """

    name: str
    busy_runs: int = 0
    first_write_delay_s: float = 0.0
    pace_s: float = 0.0

    def first_write_delay(self, running: int) -> float:
        """How long a run starting beside `running` others waits before its journal's first write."""
        return self.first_write_delay_s if self.busy_runs and running >= self.busy_runs else 0.0

    def pace(self, running: int) -> float:
        """Seconds between two writes of the replica's journal writer while `running` runs run there."""
        return self.pace_s if self.busy_runs and running >= self.busy_runs else 0.0


JOURNAL_POLICIES = {
    "at_once": JournalPolicy("at_once"),
    "batched": JournalPolicy("batched", busy_runs=16, first_write_delay_s=0.25, pace_s=0.05),
}
DEFAULT_JOURNAL_POLICY = "at_once"


def journal_policy(name: str | None = None) -> JournalPolicy:
    """The named policy (TRELLIS_JOURNAL_POLICY when no name is given); an unknown name is an error naming the
    known ones."""
    name = name or env_str("TRELLIS_JOURNAL_POLICY", DEFAULT_JOURNAL_POLICY)
    try:
        return JOURNAL_POLICIES[name]
    except KeyError:
        raise ValueError(f"TRELLIS_JOURNAL_POLICY={name!r} is not a journal policy; known: "
                         f"{', '.join(JOURNAL_POLICIES)}") from None
