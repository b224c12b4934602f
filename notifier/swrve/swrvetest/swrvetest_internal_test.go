package swrvetest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLatencyFollowsMeasuredQuantiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		u    float64
		want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{0.25, 541500 * time.Microsecond}, // halfway between 100 and 983 ms
		{0.5, 983 * time.Millisecond},
		{0.75, 2513 * time.Millisecond},
		{0.95, 3883 * time.Millisecond},
		{0.99, 5956 * time.Millisecond},
		{1, 7701 * time.Millisecond},
	} {
		if got := Latency(tc.u); (got - tc.want).Abs() > time.Microsecond {
			t.Errorf("Latency(%v) = %s, want %s", tc.u, got, tc.want)
		}
	}
	// The draws follow the distribution: the median of many is near 983 ms.
	s := NewServer(Config{Seed: 7})
	const n = 20_001
	below := 0
	for range n {
		if _, d, _ := s.start(); d <= 983*time.Millisecond {
			below++
		}
	}
	if frac := float64(below) / n; frac < 0.48 || frac > 0.52 {
		t.Errorf("%.3f of draws at or below the median, want about 0.5", frac)
	}
}

// TestSlidingSecond checks the 429 rule on a controlled clock: more than
// MaxPerSecond starts within any second, wherever the second begins.
func TestSlidingSecond(t *testing.T) {
	t.Parallel()
	s := NewServer(Config{MaxPerSecond: 3, Scale: 0.01})
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	for _, step := range []struct {
		at   time.Time
		want int // requests within the second up to and including this one
	}{
		{ms(0), 1},
		{ms(400), 2},
		{ms(800), 3},
		{ms(999), 4},  // 0, 400, 800, 999: too many
		{ms(1000), 4}, // 400, 800, 999, 1000 (0 is a full second back): too many
		{ms(1401), 4}, // 800, 999, 1000 and 1401: too many, rejected starts count
		{ms(2400), 2}, // 1401, 2400
		{ms(3400), 1}, // 2400 is exactly a second back: out
	} {
		s.now = func() time.Time { return step.at }
		if got, _, _ := s.start(); got != step.want {
			t.Fatalf("start at +%s: %d in the window, want %d", step.at.Sub(t0), got, step.want)
		}
	}
}

// TestServeHTTP checks the answers over HTTP: 200 with Swrve's JSON, 429 with
// Retry-After once the second is full, 400 for an incomplete form, and the
// injected failures.
func TestServeHTTP(t *testing.T) {
	t.Parallel()
	var seen []Request
	s := NewServer(Config{MaxPerSecond: 2, Scale: 0.0001, Observe: func(r Request) { seen = append(seen, r) }})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return at }
	post := func(form url.Values) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w
	}
	push := url.Values{"push_key": {"campaign"}, "user": {"device"}, "message": {"hi"}}
	check := func(w *httptest.ResponseRecorder, status int, retryAfter string) {
		t.Helper()
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != status || body.Code != status ||
			body.Message == "" || w.Header().Get("Retry-After") != retryAfter {
			t.Fatalf("answer %d %q (Retry-After %q), want %d with Swrve's JSON (Retry-After %q)",
				w.Code, w.Body, w.Header().Get("Retry-After"), status, retryAfter)
		}
	}

	w := post(push)
	check(w, http.StatusOK, "")
	if w.Body.String() != `{"code":200,"message":"OK"}`+"\n" {
		t.Errorf("OK body = %q", w.Body)
	}
	s.FailNext(1, http.StatusServiceUnavailable, 1500*time.Millisecond)
	check(post(push), http.StatusServiceUnavailable, "2")
	check(post(push), http.StatusTooManyRequests, "1") // the third start within the second
	at = at.Add(time.Second)
	check(post(url.Values{"push_key": {"campaign"}, "user": {"device"}}), http.StatusBadRequest, "")
	if want := (Request{PushKey: "campaign", User: "device", Message: "hi"}); len(seen) != 3 || seen[0] != want {
		t.Errorf("observed %+v, want 3 × %+v", seen, want)
	}
	if st := s.Stats(); st != (Stats{Total: 4, OK: 1, TooMany: 1, MaxConcurrent: 1, MaxPerSecond: 3}) {
		t.Errorf("Stats = %+v", st)
	}
}

// TestAnsweredAndInFlight checks what a test learns of each request: Answered
// gets every well-formed request that was answered, with its status (200, an
// injected failure, 429), but not a malformed one nor one whose client gave up
// before its answer was due; Stats.InFlight counts the requests being handled.
func TestAnsweredAndInFlight(t *testing.T) {
	t.Parallel()
	type answered struct {
		message string
		status  int
	}
	var (
		mu  sync.Mutex
		got []answered
	)
	record := func(r Request, status int) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, answered{r.Message, status})
	}
	answers := func() []answered {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	post := func(ctx context.Context, s *Server, form url.Values) int {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/push", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code
	}
	push := func(message string) url.Values {
		return url.Values{"push_key": {"campaign"}, "user": {"device"}, "message": {message}}
	}

	s := NewServer(Config{MaxPerSecond: 2, Scale: 0.0001, Answered: record})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return at }
	ctx := context.Background()
	if code := post(ctx, s, push("accepted")); code != http.StatusOK {
		t.Fatalf("first request answered %d, want 200", code)
	}
	s.FailNext(1, http.StatusBadGateway, 0)
	if code := post(ctx, s, push("failed")); code != http.StatusBadGateway {
		t.Fatalf("injected failure answered %d, want 502", code)
	}
	if code := post(ctx, s, push("too many")); code != http.StatusTooManyRequests {
		t.Fatalf("third request within the second answered %d, want 429", code)
	}
	at = at.Add(time.Second)
	if code := post(ctx, s, url.Values{"push_key": {"campaign"}, "user": {"device"}}); code != http.StatusBadRequest {
		t.Fatalf("request without a message answered %d, want 400", code)
	}
	want := []answered{{"accepted", http.StatusOK}, {"failed", http.StatusBadGateway}, {"too many", http.StatusTooManyRequests}}
	if a := answers(); !slices.Equal(a, want) {
		t.Fatalf("Answered saw %v, want %v", a, want)
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("InFlight = %d with no request open, want 0", st.InFlight)
	}

	// Latencies of at least 100 s × 10^4: the request stays open until its
	// client gives up.
	slow := NewServer(Config{Scale: 1e4, Answered: record})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- post(ctx, slow, push("abandoned")) }()
	deadline := time.Now().Add(30 * time.Second)
	for slow.Stats().InFlight != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("InFlight = %d while a request waits for its answer, want 1", slow.Stats().InFlight)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if st := slow.Stats(); st.InFlight != 0 || st.OK != 0 || st.Total != 1 {
		t.Errorf("after the client gave up: Stats %+v, want InFlight 0, OK 0, Total 1", st)
	}
	if a := answers(); !slices.Equal(a, want) {
		t.Errorf("Answered saw %v after a client gave up, want still %v", a, want)
	}
}
