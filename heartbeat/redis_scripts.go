package heartbeat

// MaxBatch is the most sensors one heartbeat script handles in a call. It
// bounds how long a script blocks Redis and keeps Lua's unpack within its stack limit;
// longer lists are split into several script calls sent in one pipeline.
const MaxBatch = 1000

// The heartbeat keys share the {heartbeat} hash tag so that, on a Redis Cluster, every
// script finds all of its keys on one node.
const (
	// hbDeadlines is a sorted set: member = sensor id, score = deadline in unix ms.
	hbDeadlines = "{heartbeat}:deadlines"
	// hbLost is a hash: sensor id → the deadline it missed, in unix ms.
	hbLost = "{heartbeat}:lost"
	// hbPending is a sorted set of losses claimed but not yet published: member =
	// sensor id, score = unix ms after which another sweep may publish it again.
	hbPending = "{heartbeat}:pending"
	// hbRestored is a hash: sensor id → "missed:seen:unpublished" of its latest
	// restore (unix ms, unpublished 1 when its loss had not been published), kept so
	// that a consumer replaying a batch after a crash gets the restore again.
	hbRestored = "{heartbeat}:restored"
	// hbRestoredAt is a sorted set: member = sensor id, score = when the restore in
	// hbRestored happened, in unix ms; it lets old restores expire in O(expired).
	hbRestoredAt = "{heartbeat}:restored-at"
	// hbLostIDs is a sorted set of the members of hbLost, every score 0, so that the
	// lost sensors can be paged through in id order (ZRANGE … BYLEX LIMIT) at the
	// cost of a page, whatever the number of lost sensors. Every script that adds to
	// or removes from hbLost does the same here, in the same step.
	hbLostIDs = "{heartbeat}:lost-ids"
	// hbLostIDsBuilt exists once hbLostIDs holds every member of hbLost: a
	// deployment that kept losses from before the index, or a Redis that lost its
	// data, builds it once (see buildLostIndex).
	hbLostIDsBuilt = "{heartbeat}:lost-ids-built"
	// hbMarker exists once the keys above were rebuilt from the durable stores; its
	// absence means Redis lost them.
	hbMarker = "{heartbeat}:rebuilt"
	// hbRebuildLock keeps two daemons from rebuilding at once.
	hbRebuildLock = "{heartbeat}:rebuild-lock"
)

// recordSrc pushes deadlines forward and ends losses, remembering each restore until
// it expires or the sensor is lost again. A sighting whose deadline is not later than
// the missed one is stale (an old batch replayed) and changes nothing.
//
// KEYS: deadlines, lost, pending, restored, restored-at, lost-ids.
// ARGV: member, score, seen, member, score, seen, …
// Returns member, "missed:seen:unpublished", 0|1 (1: a remembered restore) for each
// ended or remembered loss.
const recordSrc = `
local out, add = {}, {}
local anyLost = redis.call('HLEN', KEYS[2]) > 0
local anyRestored = redis.call('HLEN', KEYS[4]) > 0
for i = 1, #ARGV, 3 do
  local member, score, seen = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local missed = false
  if anyLost then missed = redis.call('HGET', KEYS[2], member) end
  if missed then
    if tonumber(score) > tonumber(missed) then
      redis.call('ZADD', KEYS[1], 'GT', score, member)
      redis.call('HDEL', KEYS[2], member)
      redis.call('ZREM', KEYS[6], member)
      local restore = missed .. ':' .. seen .. ':' .. redis.call('ZREM', KEYS[3], member)
      redis.call('HSET', KEYS[4], member, restore)
      redis.call('ZADD', KEYS[5], seen, member)
      out[#out + 1] = member
      out[#out + 1] = restore
      out[#out + 1] = 0
    end
  else
    add[#add + 1] = score
    add[#add + 1] = member
    if anyRestored then
      local restore = redis.call('HGET', KEYS[4], member)
      if restore then
        out[#out + 1] = member
        out[#out + 1] = restore
        out[#out + 1] = 1
      end
    end
  end
end
if #add > 0 then redis.call('ZADD', KEYS[1], 'GT', unpack(add)) end
return out
`

// claimSrc moves due sensors from the deadlines to the lost hash and the pending set
// in one step, so two sweeps never claim the same sensor. Due sensors have the lowest
// scores, so counting them and popping that many from the head takes exactly them.
// Their remembered restores end: the new loss supersedes them.
//
// KEYS: deadlines, lost, pending, restored, restored-at, lost-ids.
// ARGV: now, limit, lease. Returns member, deadline, member, deadline, …
const claimSrc = `
local n = math.min(redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[1]), tonumber(ARGV[2]))
if n == 0 then return {} end
local due = redis.call('ZPOPMIN', KEYS[1], n)
local members, lost, pending, index = {}, {}, {}, {}
for i = 1, #due, 2 do
  members[#members + 1] = due[i]
  index[#index + 1] = 0
  index[#index + 1] = due[i]
  lost[#lost + 1] = due[i]
  lost[#lost + 1] = due[i + 1]
  pending[#pending + 1] = ARGV[3]
  pending[#pending + 1] = due[i]
end
redis.call('HSET', KEYS[2], unpack(lost))
redis.call('ZADD', KEYS[6], unpack(index))
redis.call('ZADD', KEYS[3], unpack(pending))
redis.call('HDEL', KEYS[4], unpack(members))
redis.call('ZREM', KEYS[5], unpack(members))
return due
`

// reclaimSrc takes over losses whose publisher did not confirm them in time. Pending
// entries whose sensor is no longer lost (restored or forgotten) are dropped.
//
// KEYS: lost, pending. ARGV: now, limit, lease.
// Returns member, missed deadline, …
const reclaimSrc = `
local due = redis.call('ZRANGE', KEYS[2], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
local out = {}
for _, member in ipairs(due) do
  local missed = redis.call('HGET', KEYS[1], member)
  if missed then
    redis.call('ZADD', KEYS[2], ARGV[3], member)
    out[#out + 1] = member
    out[#out + 1] = missed
  else
    redis.call('ZREM', KEYS[2], member)
  end
end
return out
`

// ackSrc forgets published losses. It leaves an entry alone when the sensor has since
// been lost again with another deadline: that newer loss is not published yet.
//
// KEYS: lost, pending. ARGV: member, missed, …
const ackSrc = `
local members = {}
for i = 1, #ARGV, 2 do members[#members + 1] = ARGV[i] end
local current = redis.call('HMGET', KEYS[1], unpack(members))
local done = {}
for i, member in ipairs(members) do
  if (not current[i]) or tonumber(current[i]) == tonumber(ARGV[2 * i]) then
    done[#done + 1] = member
  end
end
if #done > 0 then redis.call('ZREM', KEYS[2], unpack(done)) end
return #done
`

// loadDeadlinesSrc merges rebuilt deadlines: scores only move forward, and a sensor
// that Redis knows to be lost stays lost.
//
// KEYS: deadlines, lost. ARGV: member, score, …
const loadDeadlinesSrc = `
local add = {}
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then
    add[#add + 1] = ARGV[i + 1]
    add[#add + 1] = ARGV[i]
  end
end
if #add > 0 then redis.call('ZADD', KEYS[1], 'GT', unpack(add)) end
return #add / 2
`

// loadLossesSrc restores losses recorded in the history. A sensor already in the
// deadlines set has reported since (after Redis lost its data): it is returned
// instead, with its deadline, because its loss has ended.
//
// KEYS: deadlines, lost, lost-ids. ARGV: member, missed, …
const loadLossesSrc = `
local seen = {}
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score then
    seen[#seen + 1] = ARGV[i]
    seen[#seen + 1] = score
  else
    redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[3], 0, ARGV[i])
  end
end
return seen
`

// expireRestoresSrc forgets restores older than a cutoff, oldest first.
//
// KEYS: restored, restored-at. ARGV: cutoff, limit. Returns how many it forgot.
const expireRestoresSrc = `
local old = redis.call('ZRANGE', KEYS[2], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
return #old
`

// indexLostSrc adds to the lost index those of the given sensors that are still
// lost: checking and adding in one step keeps a sensor restored meanwhile out.
//
// KEYS: lost, lost-ids. ARGV: member, …
const indexLostSrc = `
for _, member in ipairs(ARGV) do
  if redis.call('HEXISTS', KEYS[1], member) == 1 then redis.call('ZADD', KEYS[2], 0, member) end
end
return #ARGV
`

// unlockSrc deletes the rebuild lock only when it is still ours.
const unlockSrc = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`
