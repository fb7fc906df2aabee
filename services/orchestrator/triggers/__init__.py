"""What starts runs without a caller (schedules) and tells of their end (completion webhooks)."""

from services.orchestrator.triggers.schedules import Scheduler
from services.orchestrator.triggers.service import Triggers
from services.orchestrator.triggers.settings import TriggerSettings
from services.orchestrator.triggers.webhooks_out import WebhookDeliverer

__all__ = ["Scheduler", "TriggerSettings", "Triggers", "WebhookDeliverer"]
