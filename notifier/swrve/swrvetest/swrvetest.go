// Package swrvetest is a fake Swrve Push API for tests, benchmarks and the
// demo (lockstream fake-swrve). Like the real one, it answers 429 to a request
// when more than MaxPerSecond requests started within the last second, and
// otherwise answers {"code":200,"message":"OK"} after a delay drawn from
// Swrve's measured latency distribution (scaled by Config.Scale). It counts
// what it saw, so tests can check that a client kept to the limits.
package swrvetest

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config defaults.
const (
	// DefaultScale keeps the measured latencies as they are.
	DefaultScale = 1.0
	// DefaultMaxPerSecond is Swrve's limit.
	DefaultMaxPerSecond = 300
)

// Config configures a Server.
type Config struct {
	// Scale multiplies every latency; tests use e.g. 0.01 (a 983 ms median
	// becomes 9.83 ms). Zero or negative means the default. Defaults to
	// DefaultScale (1, the measured latencies).
	Scale float64
	// Seed seeds the latency draws, so runs are repeatable in distribution.
	// Defaults to 0 (a fixed seed like any other).
	Seed uint64
	// MaxPerSecond is how many requests may start within any sliding second;
	// the next one gets a 429. Below 1 means the default. Defaults to
	// DefaultMaxPerSecond (300).
	MaxPerSecond int
	// Observe, when set, is called with every well-formed request before it is
	// answered (including those answered 429), from the request's goroutine,
	// so it must be safe for concurrent use. Defaults to nil.
	Observe func(Request)
	// Answered, when set, is called with every well-formed request once its
	// answer is written, and the status it got (200, 429 or an injected
	// failure); a request whose client gave up before its answer was due is
	// not. Tests use it to tell which pushes were accepted, and how often.
	// It runs on the request's goroutine, so it must be safe for concurrent
	// use. Defaults to nil.
	Answered func(r Request, status int)
}

// Request is what a client asked the fake to push.
type Request struct {
	// PushKey is the campaign's push key, the form's push_key.
	PushKey string
	// User is the device's push key.
	User string
	// Message is the text to push.
	Message string
}

// quantiles are Swrve's measured response times (ms) at cumulative
// probabilities; the latency of a request is the piecewise-linear inverse CDF
// through them at a uniform draw. The 100 ms minimum is an assumption.
var quantiles = [...]struct{ p, ms float64 }{
	{0, 100}, {0.50, 983}, {0.75, 2513}, {0.95, 3883}, {0.99, 5956}, {1, 7701},
}

// Latency returns the (unscaled) response time at cumulative probability u in
// [0, 1]: 983 ms at 0.5, 7701 ms at 1.
func Latency(u float64) time.Duration {
	u = min(max(u, 0), 1)
	for i := 1; i < len(quantiles); i++ {
		lo, hi := quantiles[i-1], quantiles[i]
		if u <= hi.p {
			ms := lo.ms + (u-lo.p)/(hi.p-lo.p)*(hi.ms-lo.ms)
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	return time.Duration(quantiles[len(quantiles)-1].ms * float64(time.Millisecond))
}

// failure is an injected answer for the next requests.
type failure struct {
	status     int
	retryAfter time.Duration
}

// Server is the fake Swrve; serve it with httptest.NewServer(s) or an
// http.Server. It is safe for concurrent use.
type Server struct {
	cfg Config
	now func() time.Time // the clock; tests replace it

	mu       sync.Mutex
	rng      *rand.Rand
	starts   []time.Time // ring of the last MaxPerSecond request starts
	next     int         // where the next start goes in starts
	failures []failure   // injected answers, first one next

	total        atomic.Int64
	tooMany      atomic.Int64
	ok           atomic.Int64
	current      atomic.Int64
	maxCurrent   atomic.Int64
	maxPerSecond atomic.Int64
}

// NewServer returns a fake Swrve.
func NewServer(cfg Config) *Server {
	if !(cfg.Scale > 0) { // also catches NaN
		cfg.Scale = DefaultScale
	}
	if cfg.MaxPerSecond < 1 {
		cfg.MaxPerSecond = DefaultMaxPerSecond
	}
	return &Server{
		cfg:    cfg,
		now:    time.Now,
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x5357_5256_45)),
		starts: make([]time.Time, cfg.MaxPerSecond),
	}
}

// FailNext makes the next n requests (that pass the rate check) answer status
// with Swrve's JSON error body, and a Retry-After header when retryAfter > 0.
func (s *Server) FailNext(n, status int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, failure{status: status, retryAfter: retryAfter})
	}
}

// Stats is what a Server has seen so far.
type Stats struct {
	// Total counts every request.
	Total int64
	// OK counts requests answered 200.
	OK int64
	// TooMany counts requests answered 429 because of the rate.
	TooMany int64
	// InFlight is how many requests are being handled now: a test can wait
	// for the client to have requests open before it kills the client.
	InFlight int64
	// MaxConcurrent is the most requests that were being handled at once.
	MaxConcurrent int64
	// MaxPerSecond is the most requests that started within one sliding
	// second, counting only up to Config.MaxPerSecond + 1.
	MaxPerSecond int64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Total:         s.total.Load(),
		OK:            s.ok.Load(),
		TooMany:       s.tooMany.Load(),
		InFlight:      s.current.Load(),
		MaxConcurrent: s.maxCurrent.Load(),
		MaxPerSecond:  s.maxPerSecond.Load(),
	}
}

// ServeHTTP answers one push request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.total.Add(1)
	cur := s.current.Add(1)
	defer s.current.Add(-1)
	raise(&s.maxCurrent, cur)

	inWindow, delay, fail := s.start()
	raise(&s.maxPerSecond, int64(inWindow))

	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if err := r.ParseForm(); err != nil {
		answer(w, http.StatusBadRequest, "bad form: "+err.Error())
		return
	}
	req := Request{PushKey: r.PostForm.Get("push_key"), User: r.PostForm.Get("user"), Message: r.PostForm.Get("message")}
	if req.PushKey == "" || req.User == "" || req.Message == "" {
		answer(w, http.StatusBadRequest, "push_key, user and message are required")
		return
	}
	if s.cfg.Observe != nil {
		s.cfg.Observe(req)
	}
	if inWindow > s.cfg.MaxPerSecond {
		s.tooMany.Add(1)
		w.Header().Set("Retry-After", "1")
		s.answerRequest(w, req, http.StatusTooManyRequests, "Too Many Requests")
		return
	}
	if fail != nil {
		if fail.retryAfter > 0 {
			w.Header().Set("Retry-After", formatSeconds(fail.retryAfter))
		}
		s.answerRequest(w, req, fail.status, http.StatusText(fail.status))
		return
	}

	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return // the client gave up; nobody reads the answer
	}
	s.ok.Add(1)
	s.answerRequest(w, req, http.StatusOK, "OK")
}

// answerRequest writes the answer to a well-formed request and reports it to
// Config.Answered.
func (s *Server) answerRequest(w http.ResponseWriter, req Request, status int, message string) {
	answer(w, status, message)
	if s.cfg.Answered != nil {
		s.cfg.Answered(req, status)
	}
}

// start records a request that starts now. It returns how many requests
// started within the second up to now (counting this one, at most
// MaxPerSecond+1), the request's latency, and an injected failure if one is
// due.
func (s *Server) start() (inWindow int, delay time.Duration, fail *failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Read the clock under the lock so the ring stays in time order.
	now := s.now()
	// The ring holds the last MaxPerSecond starts, oldest at s.next. If even
	// the oldest is less than a second old, this start is one too many.
	inWindow = 1
	if oldest := s.starts[s.next]; !oldest.IsZero() && now.Sub(oldest) < time.Second {
		inWindow = s.cfg.MaxPerSecond + 1
	} else {
		for i := range s.starts {
			if st := s.starts[i]; !st.IsZero() && now.Sub(st) < time.Second {
				inWindow++
			}
		}
	}
	s.starts[s.next] = now
	s.next = (s.next + 1) % len(s.starts)

	delay = time.Duration(float64(Latency(s.rng.Float64())) * s.cfg.Scale)
	if inWindow <= s.cfg.MaxPerSecond && len(s.failures) > 0 {
		f := s.failures[0]
		s.failures = s.failures[1:]
		fail = &f
	}
	return inWindow, delay, fail
}

// raise sets m to v if v is larger.
func raise(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// formatSeconds writes d as Retry-After delay-seconds, rounded up.
func formatSeconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// answer writes Swrve's JSON answer.
func answer(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// A write error means the client went away; there is nobody to tell.
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, message})
}
