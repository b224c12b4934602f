package swrve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockstream/lockstream/storage"
)

// The shared rate (Config.Redis): every Sender on the same Redis and key
// prefix — every retrier process of a deployment — takes its turns from one
// state in Redis, on Redis' clock, so that together they keep Rate. It is the
// local gate's two rules moved into one script:
//
//   - a GCRA pace of (Rate-1) per span with no burst (the theoretical arrival
//     time, like the per-endpoint webhook limits). A turn is reserved: the
//     script names its slot (now, or the next one free, at most
//     reserveAhead away) and takes it, and the sender sleeps until then and
//     starts without asking again, as golang.org/x/time/rate does in one
//     process; so neither Redis' round trip nor a late wake-up costs a turn.
//   - a log of the starts of the last span, each timed when its request was
//     reported written to the connection (a second script), which refuses a
//     slot that would make Rate + 1 starts within a span. Reserved starts not
//     written yet count until they are.
//
// A reservation given up (the send's ctx ended before its slot) is taken out
// of the log. Keys share the hash tag {swrve}. A server that is new, restarted
// or lost its data knows nothing of the starts of the last span, so the first
// slot after that is a whole span away: the script keeps the server's run_id
// and compares.

// admitSrc reserves one start. KEYS: pace (theoretical arrival time), written
// log, pending log (reserved, not written), ticket counter, run id. ARGV:
// interval, span, the most starts in a span, how long a start may stay
// unwritten, how far ahead a slot may be reserved, the poll delay while
// unwritten starts fill the span (all µs but the count). Returns {wait µs,
// ticket}: with a ticket, the slot is reserved and starts after wait; without
// (0), ask again after wait.
const admitSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, span, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local pending_max, ahead, poll = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ttl = math.ceil((span + pending_max) / 1000) + 1000
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
if redis.call('GET', KEYS[5]) ~= run then
	redis.call('SET', KEYS[5], run)
	redis.call('SET', KEYS[1], now + span, 'PX', ttl)
end
local slot = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
if slot - now > ahead then
	return {slot - now - ahead, 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - span)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - pending_max)
local pending = redis.call('ZCARD', KEYS[3])
local n = pending + redis.call('ZCOUNT', KEYS[2], '(' .. (slot - span), '+inf')
if n >= cap then
	local need = n - cap + 1
	local e = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. (slot - span), '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
	if #e == 0 then
		return {poll, 0}
	end
	return {math.max(tonumber(e[2]) + span - slot, poll), 0}
end
local ticket = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[3], slot, ticket)
redis.call('SET', KEYS[1], slot + interval, 'PX', ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('PEXPIRE', KEYS[4], ttl)
return {slot - now, ticket}`

// writtenSrc moves a start from the pending log to the written log, timed
// now (a little after the write: on the safe side), or, with ARGV[3] set,
// drops a reservation given up. KEYS: written log, pending log. ARGV:
// ticket, key TTL (ms), give up (0 or 1).
const writtenSrc = `
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and ARGV[3] == '0' then
	local t = redis.call('TIME')
	redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[1])
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`

const (
	// sharedRetry is how soon a turn is asked for again after Redis failed.
	sharedRetry = 100 * time.Millisecond
	// reserveAhead is how far ahead a slot may be reserved: far enough that
	// the next sender asks while the last one sleeps (a few intervals at
	// 300 a second), near enough that a process dying with reservations
	// wastes little.
	reserveAhead = 25 * time.Millisecond
	// reportTimeout bounds the report of a write. It runs on the transport's
	// write goroutine; a report lost leaves the start counted until
	// pendingMax, which only slows the sends.
	reportTimeout = time.Second
)

// sharedGate takes turns from Redis. One goroutine of the process asks at a
// time (head); the others queue behind it rather than all ask Redis whenever
// a turn may be free. The head lets the next one ask as soon as it holds a
// reservation, before it sleeps until its slot.
type sharedGate struct {
	rdb        *redis.Client
	keys       []string
	admitArgs  []any
	ttlMillis  int64
	admit      *redis.Script
	report     *redis.Script
	head       chan struct{}
	errors     prometheus.Counter
	logger     *slog.Logger
	failing    atomic.Bool // Redis failed last time: logged once per outage
	pendingMax time.Duration
}

func newSharedGate(r *storage.Redis, cfg Config, errs prometheus.Counter, logger *slog.Logger) *sharedGate {
	span := time.Second + pacingJitter
	interval := time.Duration(float64(time.Second) / PacedRate(cfg.Rate))
	// A start is written within Timeout of its slot or never (the attempt's
	// deadline covers dialling and writing), so an older unwritten start is a
	// process that died.
	pendingMax := cfg.Timeout + span
	k := func(name string) string { return r.Key("{swrve}:" + name) }
	return &sharedGate{
		rdb:  r.Client(),
		keys: []string{k("pace"), k("written"), k("pending"), k("ticket"), k("run")},
		admitArgs: []any{interval.Microseconds(), span.Microseconds(), int64(cfg.Rate),
			pendingMax.Microseconds(), reserveAhead.Microseconds(), writeWaitPoll.Microseconds()},
		ttlMillis:  (span + pendingMax).Milliseconds() + 1000,
		admit:      redis.NewScript(admitSrc),
		report:     redis.NewScript(writtenSrc),
		head:       make(chan struct{}, 1),
		errors:     errs,
		logger:     logger,
		pendingMax: pendingMax,
	}
}

func (g *sharedGate) wait(ctx context.Context) (func(), error) {
	wait, ticket, err := g.reserve(ctx)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, wait); err != nil {
		g.send(ctx, ticket, true)
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { g.send(ctx, ticket, false) }) }, nil
}

// reserve asks, at the head of the process' queue, until it holds a slot,
// and returns how long until the slot and its ticket.
func (g *sharedGate) reserve(ctx context.Context) (time.Duration, int64, error) {
	select {
	case g.head <- struct{}{}:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	defer func() { <-g.head }()
	for {
		wait, ticket, err := g.ask(ctx)
		if err == nil && ticket != 0 {
			return wait, ticket, nil
		}
		if err != nil {
			wait = sharedRetry
		}
		if serr := sleep(ctx, wait); serr != nil {
			return 0, 0, errors.Join(serr, err)
		}
	}
}

// ask runs the admission script once.
func (g *sharedGate) ask(ctx context.Context) (wait time.Duration, ticket int64, err error) {
	res, err := g.admit.Run(ctx, g.rdb, g.keys, g.admitArgs...).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("admission script answered %d values, want 2", len(res))
	}
	if err != nil {
		if ctx.Err() == nil {
			g.errors.Inc()
			if !g.failing.Swap(true) {
				g.logger.WarnContext(ctx, "Swrve's shared rate cannot be read from Redis: pushes wait until it can", "err", err)
			}
		}
		return 0, 0, fmt.Errorf("asking Redis for a turn under the Swrve rate: %w", err)
	}
	if g.failing.Swap(false) {
		g.logger.InfoContext(ctx, "Swrve's shared rate is read from Redis again")
	}
	return time.Duration(res[0]) * time.Microsecond, res[1], nil
}

// send reports the start of ticket written, or its reservation given up.
func (g *sharedGate) send(ctx context.Context, ticket int64, giveUp bool) {
	ctx = context.WithoutCancel(ctx)
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	flag := 0
	if giveUp {
		flag = 1
	}
	if err := g.report.Run(rctx, g.rdb, g.keys[1:3], ticket, g.ttlMillis, flag).Err(); err != nil {
		g.errors.Inc()
		g.logger.DebugContext(ctx, "reporting a Swrve start to Redis failed; it counts until it expires",
			"err", err, "expires_after", g.pendingMax)
	}
}
