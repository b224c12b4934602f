package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Per-endpoint pacing of webhook deliveries, shared by every retrier process
// through Redis (docs/DESIGN.md "Delivery controls"). Each rate-limited endpoint
// has a theoretical arrival time (GCRA with no burst: starts are at least
// window/rate apart on Redis' clock), and each endpoint that answered 429 with
// Retry-After a block until then. Keys share the hash tag {ratelimit}, so one
// script call may touch many endpoints on a cluster too.

// WebhookAdmission asks to start one webhook delivery to a client's endpoint.
type WebhookAdmission struct {
	ClientID string
	// Rate is the endpoint's limit in deliveries per second; 0 for none (only a
	// 429's block applies then).
	Rate int
}

// admitSrc decides each request in order. KEYS are pairs (pacing key, block
// key); ARGV[1] is the window in microseconds, ARGV[i+1] request i's rate. It
// returns each request's wait in microseconds: 0 = start now (its slot is
// taken), otherwise the estimated wait for a free slot. Waits of one endpoint's
// later requests in the same call are spread one interval apart, so deferred
// deliveries do not all come back at once.
const admitSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
local local_tat = {}
local out = {}
for i = 1, #KEYS / 2 do
	local tat_key, block_key = KEYS[2 * i - 1], KEYS[2 * i]
	local rate = tonumber(ARGV[i + 1])
	local wait = 0
	local blocked = tonumber(redis.call('GET', block_key) or '0')
	if blocked > now then wait = blocked - now end
	if rate > 0 then
		local interval = math.floor(window / rate)
		local tat = local_tat[tat_key] or tonumber(redis.call('GET', tat_key) or '0')
		local start = math.max(tat, now + wait)
		if start <= now then
			redis.call('SET', tat_key, now + interval, 'PX', math.ceil(interval / 1000) + 1000)
			local_tat[tat_key] = now + interval
		else
			wait = start - now
			local_tat[tat_key] = start + interval
		end
	end
	out[i] = wait
end
return out`

// blockSrc holds an endpoint's starts back for ARGV[1] microseconds from now,
// unless a longer block runs already.
const blockSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local d = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if now + d > cur then
	redis.call('SET', KEYS[1], now + d, 'PX', math.ceil(d / 1000) + 1)
end
return 0`

func (r *Redis) paceKey(clientID string) string  { return r.key("{ratelimit}:pace:" + clientID) }
func (r *Redis) blockKey(clientID string) string { return r.key("{ratelimit}:block:" + clientID) }

// AdmitWebhooks decides, in one script call, which webhook deliveries may start
// now: a zero wait means start now (the endpoint's slot is taken); any other is
// how long that delivery should wait. Rate-limited endpoints' starts are at
// least window/rate apart (Redis clock), so at most rate start in any window;
// an endpoint blocked by Block starts nothing until the block ends.
func (r *Redis) AdmitWebhooks(ctx context.Context, reqs []WebhookAdmission, window time.Duration) ([]time.Duration, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, 2*len(reqs))
	args := make([]any, 0, 1+len(reqs))
	args = append(args, window.Microseconds())
	for _, q := range reqs {
		keys = append(keys, r.paceKey(q.ClientID), r.blockKey(q.ClientID))
		args = append(args, q.Rate)
	}
	res, err := redis.NewScript(admitSrc).Run(ctx, r.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("admitting %d webhook deliveries: %w", len(reqs), err)
	}
	if len(res) != len(reqs) {
		return nil, fmt.Errorf("admitting %d webhook deliveries: %d answers", len(reqs), len(res))
	}
	waits := make([]time.Duration, len(res))
	for i, us := range res {
		waits[i] = time.Duration(us) * time.Microsecond
	}
	return waits, nil
}

// BlockWebhooks holds the client's webhook starts back for d (a 429 with
// Retry-After), for every retrier; a longer block already running stays.
func (r *Redis) BlockWebhooks(ctx context.Context, clientID string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := redis.NewScript(blockSrc).Run(ctx, r.client, []string{r.blockKey(clientID)}, d.Microseconds()).Err(); err != nil {
		return fmt.Errorf("blocking webhooks of client %s: %w", clientID, err)
	}
	return nil
}
