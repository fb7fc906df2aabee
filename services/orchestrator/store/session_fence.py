"""Which run may write a session: its fence, checked in the same script as each write of a run's owner to the
session (store/runs.py claims and releases it, store/sessions.py stores the turn).

A run's owner holds it under an epoch: the run's attempt number (`attempts` in its record: 1 at its start, one
more with each take-over by another replica; store/runs.py). The run's own writes check that epoch in its
record; the session's keys live in another hash slot (store/keys.py), so the session keeps its own copy, the
field `fence` of the session hash: `<run id>:<epoch>` once a run claimed the session (at its start, or again
when a take-over resumes it), with `:saved` appended once that run's turn is stored. A write of run R at epoch
E is the owner's while the fence names R at an epoch no later than E; once R's turn is stored, storing it
again is refused (the same end sent again after its reply was lost). A session with no fence (one written
before fences) takes any run's writes.
"""

from __future__ import annotations

FIELD = "fence"

# Lua: the parts of a session's fence, `fence(session hash)` -> run id, epoch, saved (nil when it has none).
LUA = """
local function fence(session)
  local value = redis.call('HGET', session, 'fence')
  if not value then return nil end
  local run, epoch, saved = string.match(value, '^([^:]*):(%d+)(.*)$')
  return run, tonumber(epoch), saved ~= ''
end
-- Whether `run` at `epoch` owns the session's writes.
local function held_by(session, run, epoch)
  local holder, at = fence(session)
  return holder == nil or (holder == run and at <= tonumber(epoch))
end
"""


def value(run_id: str, epoch: int) -> str:
    return f"{run_id}:{epoch}"
