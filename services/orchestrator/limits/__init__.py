"""Limits on what tenants may use of the orchestrator (docs/limits.md):

| module | its job |
|---|---|
| `policy.py` | the limits file's shape: limits per tenant, API key and agent; weight and priority; the capacity |
| `source.py` | the limits in force: the file (`TRELLIS_LIMITS_FILE`) read again when it changes |
| `gate.py` | one replica's door: admit a run, hold a stream, charge LLM tokens; reconcile the leases |
| `slots.py` | runs at once, held streams: slots leased from Redis per replica, admitted locally |
| `windows.py` | runs started per second, LLM tokens per minute: moving windows leased in chunks |
| `fair_queue.py` | this replica's run capacity shared fairly between tenants when saturated |
| `tally.py` | this replica's admission figures per tenant (admitted, refused, tokens), for GetTenantAdmission |
| `refusal.py` | what a refused request is told (RESOURCE_EXHAUSTED, RetryInfo, QuotaFailure, RateLimit fields) |

Their Redis side is store/limits.py (and store/admission.py for the figures).
"""

from services.orchestrator.limits.gate import RunTicket, StreamTicket, TenantGate
from services.orchestrator.limits.policy import Limits, LimitsFileError, LimitsTable, parse
from services.orchestrator.limits.refusal import LimitExceeded, Overloaded
from services.orchestrator.limits.source import LimitsSource

__all__ = ["LimitExceeded", "Limits", "LimitsFileError", "LimitsSource", "LimitsTable", "Overloaded", "RunTicket",
           "StreamTicket", "TenantGate", "parse"]
