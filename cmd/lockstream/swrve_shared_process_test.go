package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
)

// TestSwrveRateSharedByRetriers: two `lockstream retrier` processes, each at
// LOCKSTREAM_SWRVE_RATE=300 (the k8s deployment's two replicas), send 1,500
// pushes to a fake Swrve that allows Swrve's 300 starts in any sliding second
// and answers in 1/100 of Swrve's time. They take their turns from one state
// in Redis, so the fake's own count of starts in any second stays at or below
// 300 and it answers no 429 (each process alone would start up to 285 a
// second: nearly 600 together); every push is SENT, accepted exactly once, and
// both processes sent some.
//
// `make test` runs it alone after every other test, like
// TestPushLoadThroughProcesses: the fake counts a request when its handler
// runs, and other tests' load on the machine delays handlers enough to
// squeeze more starts into one of its seconds than the senders made in any
// of theirs.
func TestSwrveRateSharedByRetriers(t *testing.T) {
	const (
		total   = 1500
		callers = 10
		rate    = 300
	)
	record := newSwrveRecord()
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 0.01, MaxPerSecond: rate, Seed: 5,
		Observe: record.observe, Answered: record.answered})
	fakeServer := httptest.NewServer(fake)
	t.Cleanup(fakeServer.Close)

	metricsA, metricsB := freeAddr(t), freeAddr(t)
	n := startDeliveryNode(t, []string{"api", "retrier"},
		pushSettings(t, fakeServer.URL, metricsA, fmt.Sprintf("LOCKSTREAM_SWRVE_RATE=%d", rate))...)
	n.h.start("retrier-2", "retrier", "--metrics-addr="+metricsB)
	retriers := []string{"http://" + metricsA + "/metrics", "http://" + metricsB + "/metrics"}
	for _, url := range retriers {
		waitMetrics(n, url)
	}

	pushes := make([]testPush, 0, total)
	for c := range callers {
		for i := range total / callers {
			pushes = append(pushes, newTestPush("shared", c, i))
		}
	}
	start := time.Now()
	client := &http.Client{Timeout: processWait, Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
	t.Cleanup(client.CloseIdleConnections)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for _, p := range pushes[c*total/callers : (c+1)*total/callers] {
				if _, err := postPush(client, n.api, "/push", p, http.StatusOK); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for c, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", c, err)
		}
	}

	sent := make([]float64, len(retriers))
	n.h.waitFor(fmt.Sprintf("all %d pushes to be SENT by the two retriers", total), func() (bool, string) {
		for i, url := range retriers {
			m, err := scrapeMetrics(url)
			if err != nil {
				return false, err.Error()
			}
			sent[i] = m[seriesSwrveSent]
		}
		return sent[0]+sent[1] >= total, fmt.Sprintf("SENT %v; the fake Swrve saw %+v", sent, fake.Stats())
	})

	elapsed := time.Since(start)
	st := fake.Stats()
	t.Logf("two retriers at %d/s each sent %v pushes, all SENT %s after the first post (%.0f/s); the fake Swrve saw %+v",
		rate, sent, elapsed.Round(time.Millisecond), total/elapsed.Seconds(), st)
	if st.TooMany != 0 || st.MaxPerSecond > rate {
		t.Errorf("Swrve answered %d requests 429 and saw %d starts within one second; want none and at most %d",
			st.TooMany, st.MaxPerSecond, rate)
	}
	if st.Total != total || st.OK != total {
		t.Errorf("Swrve saw %d requests, %d OK; want %d, all OK", st.Total, st.OK, total)
	}
	checkSwrveSaw(t, record.snapshot(), pushes, 1, true)
	if sent[0] == 0 || sent[1] == 0 || sent[0]+sent[1] != total {
		t.Errorf("the retriers sent %v pushes; want both some, %d together", sent, total)
	}
}
