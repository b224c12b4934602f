package swrve

import (
	"context"
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
// local gate's two rules moved into one script: a GCRA pace of (Rate-1) per
// span with no burst (the theoretical arrival time, like the per-endpoint
// webhook limits; a turn taken late by up to an interval — the asker's
// round trip and timer — does not push the next one back, or every turn
// would lose that much), and a log of the starts of the last span, each timed when
// its request was written to the connection (reported by a second script),
// that refuses a start which would make Rate + 1 within a span; starts not
// written yet count until they are. Keys share the hash tag {swrve}.
//
// A server that is new, restarted or lost its data knows nothing of the
// starts of the last span, so the first turn after that waits a whole span:
// the script keeps the server's run_id and compares.

// admitSrc decides one start. KEYS: pace (theoretical arrival time), written
// log, pending log, ticket counter, run id. ARGV: interval, span, the most
// starts in a span, how long a start may stay unwritten (µs), the poll delay
// while only unwritten starts fill the span (µs). Returns {wait µs, ticket}:
// a ticket when wait is 0.
const admitSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, span, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local pending_max, poll = tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl = math.ceil((span + pending_max) / 1000) + 1000
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
if redis.call('GET', KEYS[5]) ~= run then
	redis.call('SET', KEYS[5], run)
	redis.call('SET', KEYS[1], now + span, 'PX', ttl)
	return {span, 0}
end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat > now then
	return {tat - now, 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - span)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - pending_max)
local written = redis.call('ZCARD', KEYS[2])
local n = written + redis.call('ZCARD', KEYS[3])
if n >= cap then
	local need = n - cap + 1
	if need > written then
		return {poll, 0}
	end
	local e = redis.call('ZRANGE', KEYS[2], need - 1, need - 1, 'WITHSCORES')
	return {tonumber(e[2]) + span - now, 0}
end
local ticket = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[3], now, ticket)
redis.call('SET', KEYS[1], math.max(tat, now - interval) + interval, 'PX', ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('PEXPIRE', KEYS[4], ttl)
return {0, ticket}`

// writtenSrc moves a start from the pending log to the written log, timed
// now (a little after the write: on the safe side). KEYS: written log,
// pending log. ARGV: ticket, key TTL (ms).
const writtenSrc = `
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
	local t = redis.call('TIME')
	redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[1])
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`

const (
	// sharedRetry is how soon a turn is asked for again after Redis failed.
	sharedRetry = 100 * time.Millisecond
	// writtenTimeout bounds the report of a write. It runs on the transport's
	// write goroutine; a report lost leaves the start counted until
	// pendingMax, which only slows the sends.
	writtenTimeout = time.Second
)

// sharedGate takes turns from Redis. One goroutine of the process asks at a
// time (head): the others queue behind it rather than all ask Redis again
// whenever a turn may be free.
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
	// A start is written within Timeout of its turn or never (the attempt's
	// deadline covers dialling and writing), so an older unwritten start is a
	// process that died.
	pendingMax := cfg.Timeout + span
	k := func(name string) string { return r.Key("{swrve}:" + name) }
	return &sharedGate{
		rdb:  r.Client(),
		keys: []string{k("pace"), k("written"), k("pending"), k("ticket"), k("run")},
		admitArgs: []any{interval.Microseconds(), span.Microseconds(), int64(cfg.Rate),
			pendingMax.Microseconds(), writeWaitPoll.Microseconds()},
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
	select {
	case g.head <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-g.head }()
	for {
		wait, ticket, err := g.ask(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w (Redis: %w)", ctx.Err(), err)
			}
			wait = sharedRetry
		} else if wait == 0 {
			return g.written(ctx, ticket), nil
		}
		if serr := sleep(ctx, wait); serr != nil {
			if err != nil {
				return nil, fmt.Errorf("%w (Redis: %w)", serr, err)
			}
			return nil, serr
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

// written returns the report of the start's write.
func (g *sharedGate) written(ctx context.Context, ticket int64) func() {
	var once sync.Once
	ctx = context.WithoutCancel(ctx)
	return func() {
		once.Do(func() {
			rctx, cancel := context.WithTimeout(ctx, writtenTimeout)
			defer cancel()
			err := g.report.Run(rctx, g.rdb, g.keys[1:3], ticket, g.ttlMillis).Err()
			if err != nil {
				g.errors.Inc()
				g.logger.DebugContext(ctx, "reporting a Swrve write to Redis failed; the start counts until it expires",
					"err", err, "expires_after", g.pendingMax)
			}
		})
	}
}
