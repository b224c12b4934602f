package heartbeat

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

	"github.com/lockstream/lockstream/storage"
)

// RedisStore holds the heartbeat's sets in Redis and runs its scripts: the
// deadlines, the losses and their publication, the remembered restores. Every
// script takes the time it judges by from the caller (the heartbeat's clock or
// the consumer's watermark), never Redis' TIME, so a test or a lagging consumer
// decides what "now" is.
type RedisStore struct {
	client *redis.Client
	key    func(name string) string
}

// NewRedisStore returns the heartbeat's store on r's client, in r's key
// namespace.
func NewRedisStore(r *storage.Redis) *RedisStore {
	return &RedisStore{client: r.Client(), key: r.Key}
}

// Deadline pairs a sensor with a deadline: when it is due to be declared
// lost, or the deadline it missed.
type Deadline struct {
	// SensorID names the sensor.
	SensorID string
	// Deadline is kept to the millisecond.
	Deadline time.Time
}

// Restore is a sighting of a sensor that had been declared lost.
type Restore struct {
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

// RedisStatus is what Redis knows about one sensor.
type RedisStatus struct {
	// Deadline is when the sensor is due; zero when it is not tracked.
	Deadline time.Time
	// Missed is the deadline a lost sensor missed; zero when it is not lost.
	Missed time.Time
}

// Sighting is a sensor seen at Seen, due again at Deadline.
type Sighting struct {
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
func (r *RedisStore) RecordHeartbeats(ctx context.Context, sightings []Sighting) ([]Restore, error) {
	if len(sightings) == 0 {
		return nil, nil
	}
	calls := make([][]any, 0, (len(sightings)+MaxBatch-1)/MaxBatch)
	for chunk := range slices.Chunk(sightings, MaxBatch) {
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
	var restores []Restore
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
func parseRestore(sensorID, v string) (Restore, error) {
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return Restore{}, fmt.Errorf("malformed restore %q of %s", v, sensorID)
	}
	missed, err := millisTime(parts[0])
	if err != nil {
		return Restore{}, err
	}
	seen, err := millisTime(parts[1])
	if err != nil {
		return Restore{}, err
	}
	return Restore{SensorID: sensorID, Missed: missed, RestoredAt: seen, Unpublished: parts[2] == "1"}, nil
}

// ExpireHeartbeatRestores forgets up to limit remembered restores that happened at
// or before cutoff, and returns how many it forgot. Its cost grows with that number.
func (r *RedisStore) ExpireHeartbeatRestores(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	n, err := redis.NewScript(expireRestoresSrc).Run(ctx, r.client,
		[]string{r.key(hbRestored), r.key(hbRestoredAt)}, cutoff.UnixMilli(), clampBatch(limit)).Int()
	if err != nil {
		return 0, fmt.Errorf("expiring heartbeat restores: %w", err)
	}
	return n, nil
}

// ClaimHeartbeatExpired claims up to limit (at most MaxBatch) sensors whose
// deadline is at or before now: it moves them to the lost hash and marks their losses
// pending until lease, all atomically, so concurrent sweeps never claim a sensor
// twice. Its cost is proportional to the sensors claimed, not to the fleet. Callers
// confirm publication with AckHeartbeatLosses; unconfirmed losses come back from
// ReclaimHeartbeatPending once lease has passed.
func (r *RedisStore) ClaimHeartbeatExpired(ctx context.Context, now time.Time, limit int, lease time.Time) ([]Deadline, error) {
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
func (r *RedisStore) ReclaimHeartbeatPending(ctx context.Context, now time.Time, limit int, lease time.Time) ([]Deadline, error) {
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
func (r *RedisStore) AckHeartbeatLosses(ctx context.Context, losses []Deadline) error {
	if len(losses) == 0 {
		return nil
	}
	calls := make([][]any, 0, 1)
	for chunk := range slices.Chunk(losses, MaxBatch) {
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
func (r *RedisStore) ReleaseHeartbeatLosses(ctx context.Context, losses []Deadline) error {
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

// DeferHeartbeatLosses puts off the publication of claimed losses until hold
// after each one's deadline, in one command: they stay pending, and
// ReclaimHeartbeatPending hands each to a sweep (of any daemon) once that time
// has passed. The heartbeat holds the losses of sensors with a site this way,
// so an outage of the site can cover them.
func (r *RedisStore) DeferHeartbeatLosses(ctx context.Context, losses []Deadline, hold time.Duration) error {
	if len(losses) == 0 {
		return nil
	}
	members := make([]redis.Z, len(losses))
	for i, l := range losses {
		members[i] = redis.Z{Member: l.SensorID, Score: float64(l.Deadline.Add(hold).UnixMilli())}
	}
	if err := r.client.ZAddArgs(ctx, r.key(hbPending), redis.ZAddArgs{XX: true, Members: members}).Err(); err != nil {
		return fmt.Errorf("deferring %d heartbeat losses: %w", len(losses), err)
	}
	return nil
}

// ForgetHeartbeat removes a sensor from every heartbeat set, for a deleted sensor.
func (r *RedisStore) ForgetHeartbeat(ctx context.Context, sensorID string) error {
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

// HeartbeatStatuses returns what Redis knows of each sensor (see RedisStatus),
// in one round trip whatever the number of sensors: a sensor Redis does not know
// has a zero RedisStatus, and every id asked for has an entry.
func (r *RedisStore) HeartbeatStatuses(ctx context.Context, sensorIDs []string) (map[string]RedisStatus, error) {
	out := make(map[string]RedisStatus, len(sensorIDs))
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
		var st RedisStatus
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
func (r *RedisStore) LostHeartbeats(ctx context.Context, page storage.Page) ([]Deadline, error) {
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
	lost := make([]Deadline, 0, len(ids))
	for i, id := range ids {
		if missed[i] == nil {
			continue // restored between the two reads
		}
		t, err := millisTime(missed[i])
		if err != nil {
			return nil, fmt.Errorf("listing lost sensors: %w", err)
		}
		lost = append(lost, Deadline{SensorID: id, Deadline: t})
	}
	return lost, nil
}

// LostHeartbeatIDs returns up to page.Limit ids of lost sensors ordered by id,
// after page.After: a page of the lost index, in one round trip however many
// sensors are lost.
func (r *RedisStore) LostHeartbeatIDs(ctx context.Context, page storage.Page) ([]string, error) {
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
func (r *RedisStore) lostIDs(ctx context.Context, page storage.Page) ([]string, error) {
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
func (r *RedisStore) buildLostIndex(ctx context.Context) error {
	keys := []string{r.key(hbLost), r.key(hbLostIDs)}
	var cursor uint64
	for {
		fields, next, err := r.client.HScan(ctx, r.key(hbLost), cursor, "", MaxBatch).Result()
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
func (r *RedisStore) CountHeartbeats(ctx context.Context) (tracked, lost int64, err error) {
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
func (r *RedisStore) ShiftHeartbeatDeadline(ctx context.Context, sensorID string, delta time.Duration) error {
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
func (r *RedisStore) HeartbeatMarker(ctx context.Context) (bool, error) {
	n, err := r.client.Exists(ctx, r.key(hbMarker)).Result()
	if err != nil {
		return false, fmt.Errorf("checking heartbeat marker: %w", err)
	}
	return n == 1, nil
}

// SetHeartbeatMarker records that the heartbeat sets were rebuilt at the given time.
func (r *RedisStore) SetHeartbeatMarker(ctx context.Context, at time.Time) error {
	if err := r.client.Set(ctx, r.key(hbMarker), at.UTC().Format(time.RFC3339Nano), 0).Err(); err != nil {
		return fmt.Errorf("setting heartbeat marker: %w", err)
	}
	return nil
}

// LockHeartbeatRebuild takes the rebuild lock for ttl. ok is false when another
// daemon holds it; token releases it.
func (r *RedisStore) LockHeartbeatRebuild(ctx context.Context, ttl time.Duration) (token string, ok bool, err error) {
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
func (r *RedisStore) UnlockHeartbeatRebuild(ctx context.Context, token string) error {
	if err := redis.NewScript(unlockSrc).Run(ctx, r.client, []string{r.key(hbRebuildLock)}, token).Err(); err != nil {
		return fmt.Errorf("unlocking heartbeat rebuild: %w", err)
	}
	return nil
}

// LoadHeartbeatDeadlines merges rebuilt deadlines into the deadlines set in one round
// trip per call: a deadline only moves forward, and a sensor Redis holds as lost is
// skipped. It returns how many deadlines were applied.
func (r *RedisStore) LoadHeartbeatDeadlines(ctx context.Context, deadlines []Deadline) (int, error) {
	if len(deadlines) == 0 {
		return 0, nil
	}
	calls := make([][]any, 0, (len(deadlines)+MaxBatch-1)/MaxBatch)
	for chunk := range slices.Chunk(deadlines, MaxBatch) {
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
func (r *RedisStore) LoadHeartbeatLosses(ctx context.Context, losses []Deadline) ([]Deadline, error) {
	if len(losses) == 0 {
		return nil, nil
	}
	calls := make([][]any, 0, (len(losses)+MaxBatch-1)/MaxBatch)
	for chunk := range slices.Chunk(losses, MaxBatch) {
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
	var seen []Deadline
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
func (r *RedisStore) runScripts(ctx context.Context, src string, keys []string, calls [][]any) ([]any, error) {
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
	return max(1, min(limit, MaxBatch))
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
func deadlinePairs(res any) ([]Deadline, error) {
	items, err := resultSlice(res)
	if err != nil {
		return nil, err
	}
	out := make([]Deadline, 0, len(items)/2)
	for i := 0; i+1 < len(items); i += 2 {
		t, err := millisTime(items[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, Deadline{SensorID: fmt.Sprint(items[i]), Deadline: t})
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
