"""Settings of what starts runs without a caller (schedules) and tells of their end (completion webhooks)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import env_float, env_str


@dataclass(frozen=True)
class TriggerSettings:
    # TRELLIS_SCHEDULER_POLL_S: how often each replica looks for due schedules (a tick fires this late at most)
    scheduler_poll_s: float = 1.0
    # TRELLIS_SCHEDULE_MISFIRE_GRACE_S: a tick found later than this was missed while no replica ran: the
    # schedule's catch_up policy says whether it runs once or is skipped
    misfire_grace_s: float = 60.0
    # TRELLIS_SCHEDULER_CLOCK_KEY: tests only. The scheduler's "now" (epoch seconds) is read from this Redis key
    # when it holds one, so a test moves time for every replica without waiting for real minutes
    clock_key: str = ""
    # TRELLIS_WEBHOOK_POLL_S: how often each replica looks for webhook deliveries that are due
    webhook_poll_s: float = 1.0
    # TRELLIS_WEBHOOK_RETRY_BASE_S, TRELLIS_WEBHOOK_RETRY_MAX_S: a failed delivery is tried again after
    # base * 2^(attempts-1) seconds, at most max, with jitter
    webhook_retry_base_s: float = 10.0
    webhook_retry_max_s: float = 3600.0
    # TRELLIS_WEBHOOK_RETRY_FOR_S: how long a delivery is retried before it is given up (at least a day)
    webhook_retry_for_s: float = 26 * 3600.0
    # TRELLIS_WEBHOOK_TIMEOUT_S: one attempt's limit (connect, send, answer)
    webhook_timeout_s: float = 15.0

    @classmethod
    def from_env(cls) -> TriggerSettings:
        return cls(
            scheduler_poll_s=env_float("TRELLIS_SCHEDULER_POLL_S", cls.scheduler_poll_s),
            misfire_grace_s=env_float("TRELLIS_SCHEDULE_MISFIRE_GRACE_S", cls.misfire_grace_s),
            clock_key=env_str("TRELLIS_SCHEDULER_CLOCK_KEY", cls.clock_key),
            webhook_poll_s=env_float("TRELLIS_WEBHOOK_POLL_S", cls.webhook_poll_s),
            webhook_retry_base_s=env_float("TRELLIS_WEBHOOK_RETRY_BASE_S", cls.webhook_retry_base_s),
            webhook_retry_max_s=env_float("TRELLIS_WEBHOOK_RETRY_MAX_S", cls.webhook_retry_max_s),
            webhook_retry_for_s=env_float("TRELLIS_WEBHOOK_RETRY_FOR_S", cls.webhook_retry_for_s),
            webhook_timeout_s=env_float("TRELLIS_WEBHOOK_TIMEOUT_S", cls.webhook_timeout_s),
        )
