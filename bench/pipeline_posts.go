package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultPipelineHistory is PipelineConfig.History's default: the delivered
// webhooks in the outbox's history before the posts phase (issue 21).
const DefaultPipelineHistory = 150_000

// postWorkers bounds the posts phase's requests in flight: at 1,000 a second
// and answers within a few milliseconds a handful are; this many absorb a stall
// without the phase falling behind its rate.
const postWorkers = 256

// history flips every healthy linked sensor at once, round after round, each
// round waited for at the sink, until History webhooks have been delivered:
// the outbox then has the history a node that has run for a while has, which
// the posts phase is measured on.
func (p *pipelineRun) history(ctx context.Context) error {
	start := time.Now()
	healthy := p.cfg.healthyLinked()
	errc := make(chan error, 1)
	recorded0, err := p.counter("lockstream_deliveries_total")
	if err != nil {
		return err
	}
	for round := 0; p.res.HistoryWebhooks < p.cfg.History; round++ {
		name := fmt.Sprintf("history-%d", round)
		expect := p.sink.expect(name)
		for _, i := range healthy {
			now := time.Now()
			p.state[i] = 1 - p.state[i]
			expect(BenchSensorID(i), int(p.state[i]), now)
			p.produce(ctx, i, p.state[i], now, errc)
		}
		if err := p.flush(ctx, errc); err != nil {
			return err
		}
		received, err := p.sink.waitSettled(ctx, name, len(healthy))
		if err != nil {
			return err
		}
		p.res.HistoryWebhooks += received
	}
	p.res.HistorySeconds = time.Since(start).Seconds()
	// The posts start once the retrier has recorded every outcome, so that
	// their stages count their own deliveries.
	return p.waitCounter(ctx, "lockstream_deliveries_total", recorded0+float64(p.res.HistoryWebhooks))
}

// posts sends LatencyRate single-reading POST /v1/readings requests a second
// for LatencyDuration, each a change of a healthy linked sensor, as a user's
// devices would, and measures the time from just before each request to the
// sink's receipt of its webhook, and the time to each request's answer.
func (p *pipelineRun) posts(ctx context.Context) error {
	if p.node.APIURL == "" || p.node.IngestToken == "" {
		return fmt.Errorf("the pipeline serves no API with an ingest token")
	}
	expect := p.sink.expect("posts")
	total := int(p.cfg.LatencyRate * p.cfg.LatencyDuration.Seconds())
	healthy := p.cfg.healthyLinked()
	sampler, err := p.sampleStages(ctx)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: postWorkers}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	poster := &readingPoster{url: p.node.APIURL + "/v1/readings", token: p.node.IngestToken, client: client,
		slots: make(chan struct{}, postWorkers)}
	produced := make([]time.Time, 0, total)
	const tick = 10 * time.Millisecond
	perTick := p.cfg.LatencyRate * tick.Seconds()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	start := time.Now()
	for sent := 0; sent < total; {
		due := min(total, int(perTick*float64(time.Since(start)/tick+1)))
		for ; sent < due; sent++ {
			i := healthy[sent%len(healthy)]
			p.state[i] = 1 - p.state[i]
			now := time.Now()
			expect(BenchSensorID(i), int(p.state[i]), now)
			produced = append(produced, now)
			if err := poster.post(ctx, BenchSensorID(i), p.state[i]); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
	answers, failed := poster.wait()
	if failed != nil {
		return failed
	}
	if _, err := p.sink.waitSettled(ctx, "posts", total); err != nil {
		return err
	}
	p.res.PostStages = sampler(produced)
	lat := p.sink.latencies("posts")
	p.res.PostChanges = len(lat)
	p.res.PostP50Ms, p.res.PostP99Ms, p.res.PostMaxMs = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 1)
	p.res.PostAnswerP50Ms, p.res.PostAnswerP99Ms = quantileMs(answers, 0.50), quantileMs(answers, 0.99)
	return nil
}

// readingPoster sends single readings to the API, each from a goroutine of
// its own (at most cap(slots) at once), keeping how long each answer took and
// the first failure.
type readingPoster struct {
	url, token string
	client     *http.Client
	slots      chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	answers    []time.Duration
	err        error
}

// post starts one request; it waits only for a free slot, and returns the
// first failure seen so far.
func (rp *readingPoster) post(ctx context.Context, sensor string, data int8) error {
	select {
	case rp.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	rp.wg.Go(func() {
		defer func() { <-rp.slots }()
		start := time.Now()
		err := rp.send(ctx, sensor, data)
		rp.mu.Lock()
		defer rp.mu.Unlock()
		if err != nil && rp.err == nil {
			rp.err = err
		}
		rp.answers = append(rp.answers, time.Since(start))
	})
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.err
}

func (rp *readingPoster) send(ctx context.Context, sensor string, data int8) error {
	body := fmt.Appendf(nil, `{"sensor_id":%q,"data":%d}`, sensor, data)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rp.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+rp.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := rp.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST /v1/readings: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST /v1/readings: %s: %s", resp.Status, answer)
	}
	return nil
}

// wait waits for every request and returns their answer times and the first
// failure.
func (rp *readingPoster) wait() ([]time.Duration, error) {
	rp.wg.Wait()
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.answers, rp.err
}
