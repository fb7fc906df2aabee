"""The Lua scripts that write a run's record, its lease and its session's claim: each one atomic, fenced by the
run's epoch, and safe to run twice. `store/runs.py` registers them and is the only caller."""

from __future__ import annotations

from services.orchestrator.store import session_fence

# Each script touches the keys of one hash tag (store/keys.py): a run's, or a session's. The active set is
# written beside them in the same pipeline.
#
# Fencing: a run's owner holds it under an epoch, its attempt number (`attempts`: 1 at its start, one more with
# each take-over). Every write of the owner to the run's keys checks that epoch in the same script (here, and
# the journal's in store/journal.py), and every write to its session checks the session's fence
# (store/session_fence.py): an owner that stalled (paused, cut off) past its lease while another replica took
# the run over finds its writes refused, and stops. Every script is also safe to run twice: redis-py sends a
# command again when its connection breaks before the reply, and Redis may have run it already.

# KEYS: lease, run hash. ARGV: owner, lease ms, epoch. Renews a lease this owner still holds; 0 tells the owner
# it lost the run. A lease that ran out (its owner stalled past it: a long pause of its event loop) while no other
# replica took the run over is still this owner's at its epoch: it is taken again, rather than the owner stopping
# a run that nobody else drives (and its own reaper resuming it from the checkpoint).
RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
local run = redis.call('HMGET', KEYS[2], 'owner', 'attempts', 'status')
if run[1] ~= ARGV[1] or run[2] ~= ARGV[3] or run[3] ~= 'running' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
# KEYS: session claim, session hash. ARGV: run id, lease ms, epoch. The claim lives as long as the lease of the
# run holding it; one that ran out with its run's lease is taken again while the session's fence is still the
# run's (no other run claimed the session meanwhile).
RENEW_CLAIM = session_fence.LUA + """
local claim = redis.call('GET', KEYS[1])
if claim == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not claim and held_by(KEYS[2], ARGV[1], ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
"""
# KEYS: lease, run hash. ARGV: owner, lease ms.
# Takes a run whose owner stopped renewing: its new epoch; 0 when it is alive, -1 when gone or no longer running.
# Its lease held by this owner while the run still says it is resuming here: this take-over, sent again after
# its reply was lost (the owner is this process's id, and it takes over only runs it does not drive).
TAKE_OVER = """
local holder = redis.call('GET', KEYS[1])
if holder then
  if holder == ARGV[1] and redis.call('HGET', KEYS[2], 'owner') == ARGV[1]
      and redis.call('HGET', KEYS[2], 'resuming') == '1' then
    return tonumber(redis.call('HGET', KEYS[2], 'attempts'))
  end
  return 0
end
if redis.call('HGET', KEYS[2], 'status') ~= 'running' then return -1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'resuming', '1')
return redis.call('HINCRBY', KEYS[2], 'attempts', 1)
"""
# KEYS: session claim, session's runs, session hash. ARGV: run id, lease ms, now, the fence, the runs' TTL (s).
# One run at a time per session: 'busy' and the holder, or 'ok' with the run listed in the session's runs and
# its fence on the session; 'again' when this run holds it already (this start sent again after its reply was
# lost, or a run id used twice: the start's own reply tells which).
CLAIM = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then return {'busy', holder or '?'} end
  return {'again', ''}
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[5])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('HSET', KEYS[3], 'fence', ARGV[4]) end
return {'ok', ''}
"""
# KEYS: session claim, session hash. ARGV: run id, lease ms, epoch.
# A taken-over run takes its session back (free, or still claimed by it) and moves the session's fence to its
# new epoch (a turn stored already stays stored); 0 when another run took the session meanwhile.
RECLAIM = session_fence.LUA + """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local holder, at, saved = fence(KEYS[2])
if holder ~= nil and (holder ~= ARGV[1] or at > tonumber(ARGV[3])) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'fence', ARGV[1] .. ':' .. ARGV[3] .. (saved and ':saved' or ''))
end
return 1
"""
# KEYS: run hash, lease, cancel flag. ARGV: owner, lease ms, started_at, the run's TTL (s), then the run record's
# fields as name, value pairs. Records the run (at epoch 1) and takes its lease: 'exists' and its session when the id is taken,
# else 'ok' and whether a cancel came first. The same start sent again (its reply lost) is 'ok' again.
START = """
if redis.call('HSETNX', KEYS[1], 'status', 'running') == 0 then
  if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'started_at') ~= ARGV[3] then
    return {'exists', redis.call('HGET', KEYS[1], 'session_id') or ''}
  end
  return {'ok', tostring(redis.call('EXISTS', KEYS[3]))}
end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return {'ok', tostring(redis.call('EXISTS', KEYS[3]))}
"""
# KEYS: session claim, session's runs. ARGV: run id, drop from the runs (1/0). Undoes a claim (the run did not start).
UNCLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if ARGV[2] == '1' then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 1
"""
# KEYS: run hash, cancel flag, lease, tool-call log, thoughts log. ARGV: epoch ('' for a run no engine drives:
# waiting for the user, or without an owner), status, finished_at, error, the component it paused at (''), the
# number of tool calls, the trace's TTL (s), then the tool calls and the thoughts (JSON each). 1, or 0 when the run is not this
# owner's to end: another replica took it over, or it ended already (this end sent again after its reply was
# lost, or cancelled while its owner was away).
END = """
if ARGV[1] ~= '' and (redis.call('HGET', KEYS[1], 'attempts') ~= ARGV[1]
                      or redis.call('HGET', KEYS[1], 'status') ~= 'running') then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'finished_at', ARGV[3], 'error', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'paused_node', ARGV[5]) end
redis.call('DEL', KEYS[2], KEYS[3])
local calls = tonumber(ARGV[6])
for i = 8, #ARGV do redis.call('RPUSH', i < 8 + calls and KEYS[4] or KEYS[5], ARGV[i]) end
if calls > 0 then redis.call('EXPIRE', KEYS[4], ARGV[7]) end
if #ARGV > 7 + calls then redis.call('EXPIRE', KEYS[5], ARGV[7]) end
return 1
"""
# KEYS: paused runs. ARGV: member, now, retry at. Claims a pause whose wait expired for one replica: its score
# moves to `retry at` (another replica takes it then only if this one died before ending the pause).
CLAIM_EXPIRED = """
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""
# KEYS: run hash. ARGV: by. Marks a paused run's wait answered, once: 1 when it is marked by `by` (now, or by
# this same mark sent again after its reply was lost), 0 when something else answered it first.
MARK_ANSWERED = """
if redis.call('HSETNX', KEYS[1], 'answered', ARGV[1]) == 1 then return 1 end
return redis.call('HGET', KEYS[1], 'answered') == ARGV[1] and 1 or 0
"""
# KEYS: session claim, session hash. ARGV: run id, epoch ('': unchecked). Frees the session if this run holds
# it, and its owner at this epoch still owns the session's writes.
RELEASE = session_fence.LUA + """
if redis.call('GET', KEYS[1]) == ARGV[1] and (ARGV[2] == '' or held_by(KEYS[2], ARGV[1], ARGV[2])) then
  redis.call('DEL', KEYS[1])
end
return 1
"""
