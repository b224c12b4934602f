package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxHeartbeatBatch is the most sensors one heartbeat script handles in a call. It
// bounds how long a script blocks Redis and keeps Lua's unpack within its stack limit;
// longer lists are split into several script calls sent in one pipeline.
const MaxHeartbeatBatch = 1000

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

// HeartbeatDeadline pairs a sensor with a deadline: when it is due to be declared
// lost, or the deadline it missed.
type HeartbeatDeadline struct {
	// SensorID names the sensor.
	SensorID string
	// Deadline is kept to the millisecond.
	Deadline time.Time
}

// HeartbeatRestore is a sighting of a sensor that had been declared lost.
type HeartbeatRestore struct {
	// SensorID names the sensor.
	SensorID string
	// Missed is the deadline the sensor had missed: the loss this sighting ends.
	Missed time.Time
	// RestoredAt is the time of the sighting that ended the loss.
	RestoredAt time.Time
	// Unpublished is true when the loss had been claimed by a sweep that has not
	// published it yet; the caller should publish the loss before the restore.
	Unpublished bool
	// Replay is true when the loss had already been ended by an earlier sighting:
	// this is that restore again, remembered for a caller that may have crashed
	// before publishing it.
	Replay bool
}

// HeartbeatStatus is what Redis knows about one sensor.
type HeartbeatStatus struct {
	// Deadline is when the sensor is due; zero when it is not tracked.
	Deadline time.Time
	// Missed is the deadline a lost sensor missed; zero when it is not lost.
	Missed time.Time
}

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

// HeartbeatSighting is a sensor seen at Seen, due again at Deadline.
type HeartbeatSighting struct {
	// SensorID names the sensor.
	SensorID string
	// Seen is the server receive time of the sighting; it is kept with a restore.
	Seen time.Time
	// Deadline is when the sensor is due next if it stays silent.
	Deadline time.Time
}

// RecordHeartbeats pushes each sensor's deadline forward (never back: an old batch
// replayed cannot undo a newer one) in one round trip, and ends the loss of every
// sighted sensor that was lost, atomically, so each loss is ended exactly once.
//
// Each restore is remembered until ExpireHeartbeatRestores forgets it or the sensor
// is lost again, and returned again, marked Replay, for any later sighting of the
// sensor: a caller that crashed before publishing a restore gets it back when it
// replays its input.
func (r *Redis) RecordHeartbeats(ctx context.Context, sightings []HeartbeatSighting) ([]HeartbeatRestore, error) {
	if len(sightings) == 0 {
		return nil, nil
	}
	calls := make([][]any, 0, (len(sightings)+MaxHeartbeatBatch-1)/MaxHeartbeatBatch)
	for chunk := range slices.Chunk(sightings, MaxHeartbeatBatch) {
		args := make([]any, 0, 3*len(chunk))
		for _, s := range chunk {
			args = append(args, s.SensorID, s.Deadline.UnixMilli(), s.Seen.UnixMilli())
		}
		calls = append(calls, args)
	}
	keys := []string{r.key(hbDeadlines), r.key(hbLost), r.key(hbPending), r.key(hbRestored), r.key(hbRestoredAt),
		r.key(hbLostIDs)}
	results, err := r.runScripts(ctx, recordSrc, keys, calls)
	if err != nil {
		return nil, fmt.Errorf("recording heartbeats: %w", err)
	}
	var restores []HeartbeatRestore
	for _, res := range results {
		items, err := resultSlice(res)
		if err != nil {
			return nil, fmt.Errorf("recording heartbeats: %w", err)
		}
		for i := 0; i+2 < len(items); i += 3 {
			restore, err := parseRestore(fmt.Sprint(items[i]), fmt.Sprint(items[i+1]))
			if err != nil {
				return nil, fmt.Errorf("recording heartbeats: %w", err)
			}
			replay, _ := items[i+2].(int64)
			restore.Replay = replay == 1
			restores = append(restores, restore)
		}
	}
	return restores, nil
}

// parseRestore decodes a remembered restore, "missed:seen:unpublished".
func parseRestore(sensorID, v string) (HeartbeatRestore, error) {
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return HeartbeatRestore{}, fmt.Errorf("malformed restore %q of %s", v, sensorID)
	}
	missed, err := millisTime(parts[0])
	if err != nil {
		return HeartbeatRestore{}, err
	}
	seen, err := millisTime(parts[1])
	if err != nil {
		return HeartbeatRestore{}, err
	}
	return HeartbeatRestore{SensorID: sensorID, Missed: missed, RestoredAt: seen, Unpublished: parts[2] == "1"}, nil
}

// ExpireHeartbeatRestores forgets up to limit remembered restores that happened at
// or before cutoff, and returns how many it forgot. Its cost grows with that number.
func (r *Redis) ExpireHeartbeatRestores(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	n, err := redis.NewScript(expireRestoresSrc).Run(ctx, r.client,
		[]string{r.key(hbRestored), r.key(hbRestoredAt)}, cutoff.UnixMilli(), clampBatch(limit)).Int()
	if err != nil {
		return 0, fmt.Errorf("expiring heartbeat restores: %w", err)
	}
	return n, nil
}

// ClaimHeartbeatExpired claims up to limit (at most MaxHeartbeatBatch) sensors whose
// deadline is at or before now: it moves them to the lost hash and marks their losses
// pending until lease, all atomically, so concurrent sweeps never claim a sensor
// twice. Its cost is proportional to the sensors claimed, not to the fleet. Callers
// confirm publication with AckHeartbeatLosses; unconfirmed losses come back from
// ReclaimHeartbeatPending once lease has passed.
func (r *Redis) ClaimHeartbeatExpired(ctx context.Context, now time.Time, limit int, lease time.Time) ([]HeartbeatDeadline, error) {
	res, err := redis.NewScript(claimSrc).Run(ctx, r.client,
		[]string{r.key(hbDeadlines), r.key(hbLost), r.key(hbPending), r.key(hbRestored), r.key(hbRestoredAt),
			r.key(hbLostIDs)},
		now.UnixMilli(), clampBatch(limit), lease.UnixMilli()).Result()
	if err != nil {
		return nil, fmt.Errorf("claiming expired heartbeats: %w", err)
	}
	claimed, err := deadlinePairs(res)
	if err != nil {
		return nil, fmt.Errorf("claiming expired heartbeats: %w", err)
	}
	return claimed, nil
}

// ReclaimHeartbeatPending takes over up to limit losses whose lease ended before now
// without their publication being confirmed (their publisher failed or died), and
// extends their lease to lease. Each is returned with the deadline it missed.
func (r *Redis) ReclaimHeartbeatPending(ctx context.Context, now time.Time, limit int, lease time.Time) ([]HeartbeatDeadline, error) {
	res, err := redis.NewScript(reclaimSrc).Run(ctx, r.client,
		[]string{r.key(hbLost), r.key(hbPending)},
		now.UnixMilli(), clampBatch(limit), lease.UnixMilli()).Result()
	if err != nil {
		return nil, fmt.Errorf("reclaiming pending heartbeat losses: %w", err)
	}
	reclaimed, err := deadlinePairs(res)
	if err != nil {
		return nil, fmt.Errorf("reclaiming pending heartbeat losses: %w", err)
	}
	return reclaimed, nil
}

// AckHeartbeatLosses records that these losses were published.
func (r *Redis) AckHeartbeatLosses(ctx context.Context, losses []HeartbeatDeadline) error {
	if len(losses) == 0 {
		return nil
	}
	calls := make([][]any, 0, 1)
	for chunk := range slices.Chunk(losses, MaxHeartbeatBatch) {
		args := make([]any, 0, 2*len(chunk))
		for _, l := range chunk {
			args = append(args, l.SensorID, l.Deadline.UnixMilli())
		}
		calls = append(calls, args)
	}
	if _, err := r.runScripts(ctx, ackSrc, []string{r.key(hbLost), r.key(hbPending)}, calls); err != nil {
		return fmt.Errorf("acknowledging heartbeat losses: %w", err)
	}
	return nil
}

// ReleaseHeartbeatLosses ends the lease on losses whose publication failed, so the
// next sweep, by any daemon, publishes them again without waiting for the lease.
func (r *Redis) ReleaseHeartbeatLosses(ctx context.Context, losses []HeartbeatDeadline) error {
	if len(losses) == 0 {
		return nil
	}
	members := make([]redis.Z, len(losses))
	for i, l := range losses {
		members[i] = redis.Z{Member: l.SensorID, Score: 0}
	}
	if err := r.client.ZAddArgs(ctx, r.key(hbPending), redis.ZAddArgs{XX: true, Members: members}).Err(); err != nil {
		return fmt.Errorf("releasing heartbeat losses: %w", err)
	}
	return nil
}

// ForgetHeartbeat removes a sensor from every heartbeat set, for a deleted sensor.
func (r *Redis) ForgetHeartbeat(ctx context.Context, sensorID string) error {
	_, err := r.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZRem(ctx, r.key(hbDeadlines), sensorID)
		pipe.HDel(ctx, r.key(hbLost), sensorID)
		pipe.ZRem(ctx, r.key(hbLostIDs), sensorID)
		pipe.ZRem(ctx, r.key(hbPending), sensorID)
		pipe.HDel(ctx, r.key(hbRestored), sensorID)
		pipe.ZRem(ctx, r.key(hbRestoredAt), sensorID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("forgetting heartbeat of %s: %w", sensorID, err)
	}
	return nil
}

// HeartbeatStatuses returns what Redis knows of each sensor (see HeartbeatStatus),
// in one round trip whatever the number of sensors: a sensor Redis does not know
// has a zero HeartbeatStatus, and every id asked for has an entry.
func (r *Redis) HeartbeatStatuses(ctx context.Context, sensorIDs []string) (map[string]HeartbeatStatus, error) {
	out := make(map[string]HeartbeatStatus, len(sensorIDs))
	if len(sensorIDs) == 0 {
		return out, nil
	}
	var (
		deadlines *redis.FloatSliceCmd
		missed    *redis.SliceCmd
	)
	_, err := r.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		deadlines = pipe.ZMScore(ctx, r.key(hbDeadlines), sensorIDs...)
		missed = pipe.HMGet(ctx, r.key(hbLost), sensorIDs...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("getting heartbeats of %d sensors: %w", len(sensorIDs), err)
	}
	scores, lost := deadlines.Val(), missed.Val()
	if len(scores) != len(sensorIDs) || len(lost) != len(sensorIDs) {
		return nil, fmt.Errorf("getting heartbeats of %d sensors: %d deadlines and %d losses returned",
			len(sensorIDs), len(scores), len(lost))
	}
	for i, id := range sensorIDs {
		var st HeartbeatStatus
		// ZMSCORE answers 0 for a missing member; no real deadline is the epoch.
		if scores[i] != 0 {
			st.Deadline = time.UnixMilli(int64(scores[i])).UTC()
		}
		if lost[i] != nil {
			if st.Missed, err = millisTime(lost[i]); err != nil {
				return nil, fmt.Errorf("getting heartbeat of %s: %w", id, err)
			}
		}
		out[id] = st
	}
	return out, nil
}

// LostHeartbeats returns up to page.Limit lost sensors ordered by id, after
// page.After, each with the deadline it missed. It reads a page of the lost index
// and that page's deadlines: two round trips and a page's worth of work, however
// many sensors are lost.
func (r *Redis) LostHeartbeats(ctx context.Context, page Page) ([]HeartbeatDeadline, error) {
	if page.Limit <= 0 {
		return nil, nil
	}
	ids, err := r.lostIDs(ctx, page)
	if err != nil {
		return nil, fmt.Errorf("listing lost sensors: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	missed, err := r.client.HMGet(ctx, r.key(hbLost), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("listing lost sensors: %w", err)
	}
	lost := make([]HeartbeatDeadline, 0, len(ids))
	for i, id := range ids {
		if missed[i] == nil {
			continue // restored between the two reads
		}
		t, err := millisTime(missed[i])
		if err != nil {
			return nil, fmt.Errorf("listing lost sensors: %w", err)
		}
		lost = append(lost, HeartbeatDeadline{SensorID: id, Deadline: t})
	}
	return lost, nil
}

// LostHeartbeatIDs returns up to page.Limit ids of lost sensors ordered by id,
// after page.After: a page of the lost index, in one round trip however many
// sensors are lost.
func (r *Redis) LostHeartbeatIDs(ctx context.Context, page Page) ([]string, error) {
	if page.Limit <= 0 {
		return nil, nil
	}
	ids, err := r.lostIDs(ctx, page)
	if err != nil {
		return nil, fmt.Errorf("listing lost sensors: %w", err)
	}
	return ids, nil
}

// lostIDs reads a page of the lost index, building the index first when it is
// not built yet (one EXISTS, pipelined with the read).
func (r *Redis) lostIDs(ctx context.Context, page Page) ([]string, error) {
	read := func(pipe redis.Cmdable) *redis.StringSliceCmd {
		start := "-"
		if page.After != "" {
			start = "(" + page.After
		}
		return pipe.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: r.key(hbLostIDs), Start: start, Stop: "+", ByLex: true, Count: int64(page.Limit),
		})
	}
	var (
		built *redis.IntCmd
		ids   *redis.StringSliceCmd
	)
	if _, err := r.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		built = pipe.Exists(ctx, r.key(hbLostIDsBuilt))
		ids = read(pipe)
		return nil
	}); err != nil {
		return nil, err
	}
	if built.Val() == 1 {
		return ids.Val(), nil
	}
	if err := r.buildLostIndex(ctx); err != nil {
		return nil, err
	}
	return read(r.client).Result()
}

// buildLostIndex adds every member of the lost hash to the lost index, a chunk at
// a time, then marks the index built. It runs once per deployment (and again after
// Redis lost its data); its cost follows the number of lost sensors. Several may
// run at once: adding is idempotent, and a sensor restored meanwhile stays out.
func (r *Redis) buildLostIndex(ctx context.Context) error {
	keys := []string{r.key(hbLost), r.key(hbLostIDs)}
	var cursor uint64
	for {
		fields, next, err := r.client.HScan(ctx, r.key(hbLost), cursor, "", MaxHeartbeatBatch).Result()
		if err != nil {
			return fmt.Errorf("building the lost index: %w", err)
		}
		members := make([][]any, 0, 1)
		var chunk []any
		for i := 0; i < len(fields); i += 2 {
			chunk = append(chunk, fields[i])
		}
		if len(chunk) > 0 {
			members = append(members, chunk)
			if _, err := r.runScripts(ctx, indexLostSrc, keys, members); err != nil {
				return fmt.Errorf("building the lost index: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if err := r.client.Set(ctx, r.key(hbLostIDsBuilt), "1", 0).Err(); err != nil {
		return fmt.Errorf("building the lost index: %w", err)
	}
	return nil
}

// CountHeartbeats returns how many sensors are tracked (have a deadline) and how many
// are lost.
func (r *Redis) CountHeartbeats(ctx context.Context) (tracked, lost int64, err error) {
	var trackedCmd, lostCmd *redis.IntCmd
	_, err = r.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		trackedCmd = pipe.ZCard(ctx, r.key(hbDeadlines))
		lostCmd = pipe.HLen(ctx, r.key(hbLost))
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("counting heartbeats: %w", err)
	}
	return trackedCmd.Val(), lostCmd.Val(), nil
}

// ShiftHeartbeatDeadline moves a tracked sensor's deadline by delta (either way), for
// a sensor whose timeout changed. An untracked or lost sensor is left alone.
func (r *Redis) ShiftHeartbeatDeadline(ctx context.Context, sensorID string, delta time.Duration) error {
	err := r.client.ZAddArgsIncr(ctx, r.key(hbDeadlines), redis.ZAddArgs{
		XX:      true,
		Members: []redis.Z{{Member: sensorID, Score: float64(delta.Milliseconds())}},
	}).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("shifting heartbeat deadline of %s: %w", sensorID, err)
	}
	return nil
}

// HeartbeatMarker reports whether the rebuild marker exists. Its absence means the
// heartbeat sets were never built or Redis lost them.
func (r *Redis) HeartbeatMarker(ctx context.Context) (bool, error) {
	n, err := r.client.Exists(ctx, r.key(hbMarker)).Result()
	if err != nil {
		return false, fmt.Errorf("checking heartbeat marker: %w", err)
	}
	return n == 1, nil
}

// SetHeartbeatMarker records that the heartbeat sets were rebuilt at the given time.
func (r *Redis) SetHeartbeatMarker(ctx context.Context, at time.Time) error {
	if err := r.client.Set(ctx, r.key(hbMarker), at.UTC().Format(time.RFC3339Nano), 0).Err(); err != nil {
		return fmt.Errorf("setting heartbeat marker: %w", err)
	}
	return nil
}

// LockHeartbeatRebuild takes the rebuild lock for ttl. ok is false when another
// daemon holds it; token releases it.
func (r *Redis) LockHeartbeatRebuild(ctx context.Context, ttl time.Duration) (token string, ok bool, err error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token = hex.EncodeToString(b)
	ok, err = r.client.SetNX(ctx, r.key(hbRebuildLock), token, ttl).Result()
	if err != nil {
		return "", false, fmt.Errorf("locking heartbeat rebuild: %w", err)
	}
	return token, ok, nil
}

// UnlockHeartbeatRebuild releases the rebuild lock if token still holds it.
func (r *Redis) UnlockHeartbeatRebuild(ctx context.Context, token string) error {
	if err := redis.NewScript(unlockSrc).Run(ctx, r.client, []string{r.key(hbRebuildLock)}, token).Err(); err != nil {
		return fmt.Errorf("unlocking heartbeat rebuild: %w", err)
	}
	return nil
}

// LoadHeartbeatDeadlines merges rebuilt deadlines into the deadlines set in one round
// trip per call: a deadline only moves forward, and a sensor Redis holds as lost is
// skipped. It returns how many deadlines were applied.
func (r *Redis) LoadHeartbeatDeadlines(ctx context.Context, deadlines []HeartbeatDeadline) (int, error) {
	if len(deadlines) == 0 {
		return 0, nil
	}
	calls := make([][]any, 0, (len(deadlines)+MaxHeartbeatBatch-1)/MaxHeartbeatBatch)
	for chunk := range slices.Chunk(deadlines, MaxHeartbeatBatch) {
		args := make([]any, 0, 2*len(chunk))
		for _, d := range chunk {
			args = append(args, d.SensorID, d.Deadline.UnixMilli())
		}
		calls = append(calls, args)
	}
	results, err := r.runScripts(ctx, loadDeadlinesSrc, []string{r.key(hbDeadlines), r.key(hbLost)}, calls)
	if err != nil {
		return 0, fmt.Errorf("loading heartbeat deadlines: %w", err)
	}
	loaded := 0
	for _, res := range results {
		n, _ := res.(int64)
		loaded += int(n)
	}
	return loaded, nil
}

// LoadHeartbeatLosses restores losses recorded in the history into the lost hash,
// keeping any loss Redis already holds. A sensor that already has a deadline has
// reported since its loss: it is not marked lost but returned, with its current
// deadline, so the caller can publish the restore that Redis could not detect.
func (r *Redis) LoadHeartbeatLosses(ctx context.Context, losses []HeartbeatDeadline) ([]HeartbeatDeadline, error) {
	if len(losses) == 0 {
		return nil, nil
	}
	calls := make([][]any, 0, (len(losses)+MaxHeartbeatBatch-1)/MaxHeartbeatBatch)
	for chunk := range slices.Chunk(losses, MaxHeartbeatBatch) {
		args := make([]any, 0, 2*len(chunk))
		for _, l := range chunk {
			args = append(args, l.SensorID, l.Deadline.UnixMilli())
		}
		calls = append(calls, args)
	}
	results, err := r.runScripts(ctx, loadLossesSrc, []string{r.key(hbDeadlines), r.key(hbLost), r.key(hbLostIDs)}, calls)
	if err != nil {
		return nil, fmt.Errorf("loading heartbeat losses: %w", err)
	}
	var seen []HeartbeatDeadline
	for _, res := range results {
		pairs, err := deadlinePairs(res)
		if err != nil {
			return nil, fmt.Errorf("loading heartbeat losses: %w", err)
		}
		seen = append(seen, pairs...)
	}
	return seen, nil
}

// runScripts runs src once per argument list, all in one pipeline (one round trip).
// The first time a server sees the script, EVALSHA fails with NOSCRIPT: the script is
// then loaded and the pipeline sent again, which is safe because a NOSCRIPT call did
// not run at all.
func (r *Redis) runScripts(ctx context.Context, src string, keys []string, calls [][]any) ([]any, error) {
	script := redis.NewScript(src)
	run := func() ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(calls))
		_, err := r.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, args := range calls {
				cmds[i] = script.EvalSha(ctx, pipe, keys, args...)
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := script.Load(ctx, r.client).Err(); err != nil {
			return nil, fmt.Errorf("loading script: %w", err)
		}
		cmds, err = run()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	results := make([]any, len(cmds))
	for i, cmd := range cmds {
		res, err := cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		results[i] = res
	}
	return results, nil
}

func clampBatch(limit int) int {
	return max(1, min(limit, MaxHeartbeatBatch))
}

func resultSlice(res any) ([]any, error) {
	if res == nil {
		return nil, nil
	}
	items, ok := res.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected script result %T", res)
	}
	return items, nil
}

// deadlinePairs decodes a script's flat member, unix-ms list.
func deadlinePairs(res any) ([]HeartbeatDeadline, error) {
	items, err := resultSlice(res)
	if err != nil {
		return nil, err
	}
	out := make([]HeartbeatDeadline, 0, len(items)/2)
	for i := 0; i+1 < len(items); i += 2 {
		t, err := millisTime(items[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, HeartbeatDeadline{SensorID: fmt.Sprint(items[i]), Deadline: t})
	}
	return out, nil
}

// millisTime parses unix milliseconds as Redis returns them: an integer, or a score
// string such as "1763805600000" (scores are doubles, exact for millisecond times).
func millisTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case int64:
		return time.UnixMilli(v).UTC(), nil
	case string:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("parsing unix ms %q: %w", v, err)
		}
		return time.UnixMilli(int64(f)).UTC(), nil
	default:
		return time.Time{}, fmt.Errorf("unexpected unix ms %T", v)
	}
}
