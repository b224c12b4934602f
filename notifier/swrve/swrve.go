// Package swrve sends mobile pushes through Swrve's Push API
// (https://service.swrve.com/push): a form-encoded POST of push_key (the
// transactional campaign key of the message prototype and platform, from the
// YAML mapping), user (the device's push key) and message, answered with
// {"code":200,"message":"OK"}.
//
// Swrve accepts at most 300 requests a second and takes about a second to
// answer, so a Sender paces the requests it starts and caps those in flight.
// Both limits hold across every goroutine that uses the Sender, so a process
// must create one Sender and share it (the retrier's push deliveries and the
// push API alike). With Config.Redis the rate holds across every process too
// (every Sender on that Redis and key prefix takes its turns from one state
// there); the pool stays a process's own. A Send that finds the pool full or the rate used up waits
// for its turn (or for ctx): the Sender starts no goroutines per push (only
// the HTTP transport's per connection, at most one connection per pool slot)
// and drops nothing.
//
// A Sender makes one attempt per Send and classifies it; retrying is the
// caller's job.
package swrve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/notifier"
)

// The ErrorType values of the results Send returns.
const (
	// ErrorTypeSwrve: Swrve answered with an error status. Retry for 429,
	// 500, 502, 503 and 504; Failed for every other 4xx and 5xx.
	ErrorTypeSwrve = "SWRVE"
	// ErrorTypeMessagePrototypeKey: Failed, the mapping has no push key for
	// the message prototype and platform; no request was made.
	ErrorTypeMessagePrototypeKey = "MESSAGE_PROTOTYPE_KEY"
	// ErrorTypeOther: Failed for anything else that another attempt would not
	// fix (an empty device key or message, a 1xx or 3xx answer).
	ErrorTypeOther = "OTHER"
	// ErrorTypeTimeout: Retry, no answer within Config.Timeout or ctx's deadline.
	ErrorTypeTimeout = "TIMEOUT"
	// ErrorTypeConnection: Retry, the request could not be sent or its answer
	// read (refused, reset, TLS or DNS failure).
	ErrorTypeConnection = "CONNECTION"
	// ErrorTypeCanceled: Retry, the caller cancelled ctx (shutdown).
	ErrorTypeCanceled = "CANCELED"
	// ErrorTypeBusy: Retry, ctx ended (or its deadline came too close) while
	// the send waited for a free slot in the pool or for its turn under the
	// rate (a shared rate waits while Redis cannot be reached: Err then names
	// Redis' error); no request was made.
	ErrorTypeBusy = "BUSY"
)

// Push is one message to one device.
type Push struct {
	// Platform is the device's platform, IOS or ANDROID.
	Platform domain.Platform
	// MessagePrototypeKey names the message prototype whose push key (for
	// Platform) is the campaign Swrve sends through.
	MessagePrototypeKey string
	// PushKey is the device's push key, Swrve's "user".
	PushKey string
	// Message is the text shown on the device.
	Message string
}

// APIError is the Err of a result when Swrve answered with a non-2xx status:
// its HTTP status and the code and message of its JSON answer. The push API
// keeps Code and Message with every attempt; get them with errors.As.
type APIError struct {
	// HTTPStatus is the answer's status code.
	HTTPStatus int
	// Code is the answer's "code"; 0 when the body was not Swrve's JSON.
	Code int
	// Message is the answer's "message", or the start of the body when it was
	// not Swrve's JSON.
	Message string
}

// Error describes the answer.
func (e *APIError) Error() string {
	s := fmt.Sprintf("swrve answered %d %s", e.HTTPStatus, http.StatusText(e.HTTPStatus))
	if e.Code != 0 {
		s += fmt.Sprintf(" (code %d)", e.Code)
	}
	if e.Message != "" {
		s += ": " + strconv.Quote(e.Message)
	}
	return s
}

// errorSnippetBytes bounds how much of a non-JSON answer goes into an APIError.
const errorSnippetBytes = 256

// Sender sends pushes to Swrve. It is safe for concurrent use; see the package
// documentation for why a process should have only one.
type Sender struct {
	cfg       Config
	keys      PushKeys
	url       string
	transport *http.Transport
	client    *http.Client
	gate      gate
	slots     chan struct{}
	m         *metrics
	logger    *slog.Logger
}

// New returns a Sender, loading the push keys from cfg.PushKeysFile when set.
// It registers the lockstream_swrve_* metrics with reg; logger may be nil.
func New(cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Sender, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	keys := cfg.PushKeys
	if cfg.PushKeysFile != "" {
		var err error
		if keys, err = LoadPushKeys(cfg.PushKeysFile); err != nil {
			return nil, err
		}
	}
	if len(keys) == 0 {
		logger.Warn("no Swrve push keys configured: every push fails with " + ErrorTypeMessagePrototypeKey)
	}
	pool := cfg.PoolSize()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.poolSize.Set(float64(pool))
	var g gate = newLocalGate(cfg.Rate)
	if cfg.Redis != nil {
		g = newSharedGate(cfg.Redis, cfg, m.rateErrors, logger)
	}

	transport := &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2: true,
		// One connection per request in flight at most, all kept for reuse:
		// closing and re-dialling them would add latency and jitter to the
		// paced starts.
		MaxConnsPerHost:       pool,
		MaxIdleConns:          pool,
		MaxIdleConnsPerHost:   pool,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &Sender{
		cfg:       cfg,
		keys:      keys,
		url:       cfg.URL,
		transport: transport,
		client: &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		gate:   g,
		slots:  make(chan struct{}, pool),
		m:      m,
		logger: logger,
	}, nil
}

// PoolSize is how many requests the Sender keeps in flight at most.
func (s *Sender) PoolSize() int { return cap(s.slots) }

// Close releases idle connections. Sends may still run; they open new ones.
func (s *Sender) Close() {
	s.transport.CloseIdleConnections()
}

// Send makes one attempt to push p and classifies it. A 2xx answer is Sent;
// 429, 500, 502, 503 and 504 (with Swrve's Retry-After), timeouts and
// connection errors are Retry; other 4xx and 5xx are Failed with ErrorType
// SWRVE, and Err is an *APIError with Swrve's code and message. A prototype
// without a push key for the platform is Failed with MESSAGE_PROTOTYPE_KEY,
// without any request.
//
// Send first waits for a free slot in the pool, then for its turn under the
// rate; if ctx ends first, the result is Retry with ErrorType BUSY. Callers
// that keep many sends waiting should give ctx no deadline shorter than the
// wait they accept.
func (s *Sender) Send(ctx context.Context, p Push) notifier.Result {
	res := s.send(ctx, p)
	s.m.sends.WithLabelValues(strings.ToLower(res.Outcome.String()), res.ErrorType).Inc()
	return res
}

func (s *Sender) send(ctx context.Context, p Push) notifier.Result {
	if p.PushKey == "" {
		return failed(ErrorTypeOther, errors.New("push has no device push key"))
	}
	if p.Message == "" {
		return failed(ErrorTypeOther, errors.New("push has no message"))
	}
	campaign, ok := s.keys.Lookup(p.MessagePrototypeKey, p.Platform)
	if !ok {
		return failed(ErrorTypeMessagePrototypeKey,
			fmt.Errorf("no Swrve push key for message prototype %q on platform %q", p.MessagePrototypeKey, p.Platform))
	}

	s.m.waiting.Inc()
	wrote, release, err := s.acquire(ctx)
	s.m.waiting.Dec()
	if err != nil {
		return notifier.Result{Outcome: notifier.Retry, ErrorType: ErrorTypeBusy, Err: err}
	}
	defer release()

	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()
	start := time.Now()
	res := s.post(ctx, url.Values{"push_key": {campaign}, "user": {p.PushKey}, "message": {p.Message}}, wrote)
	res.Duration = time.Since(start)
	s.m.responseTime.Observe(res.Duration.Seconds())
	return res
}

// acquire takes a slot in the pool and then waits for its turn under the
// rate; the request must then report its write with wrote. The slot comes
// first: a send that got its turn and then waited for a slot would start
// together with every other such send the moment slots free up, a burst the
// rate was meant to prevent.
func (s *Sender) acquire(ctx context.Context) (wrote, release func(), err error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for a free slot in the Swrve pool: %w", ctx.Err())
	}
	if wrote, err = s.gate.wait(ctx); err != nil {
		<-s.slots
		return nil, nil, fmt.Errorf("waiting for a turn under the Swrve rate: %w", err)
	}
	return wrote, func() { <-s.slots }, nil
}

// post sends the form and classifies the answer. It calls wrote once the
// request is written to the connection, or, failing that, when it returns.
func (s *Sender) post(ctx context.Context, form url.Values, wrote func()) notifier.Result {
	defer wrote() // ignored if the write was recorded already
	attemptCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	traced := httptrace.WithClientTrace(attemptCtx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote() },
	})
	req, err := http.NewRequestWithContext(traced, http.MethodPost, s.url, strings.NewReader(form.Encode()))
	if err != nil {
		return failed(ErrorTypeOther, fmt.Errorf("building Swrve request: %w", err))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "lockstream-swrve/1")

	resp, err := s.client.Do(req)
	if err != nil {
		return transportError(ctx, attemptCtx, err)
	}
	defer resp.Body.Close()
	s.m.responses.WithLabelValues(statusLabel(resp.StatusCode)).Inc()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes))
	if err != nil && (resp.StatusCode < 200 || resp.StatusCode >= 300) {
		// The status decides the outcome; a broken error body only loses
		// Swrve's message. (A 2xx whose body broke off was still accepted.)
		s.logger.Debug("reading Swrve error answer", "status", resp.StatusCode, "error", err)
	}

	apiErr := apiError(resp.StatusCode, body)
	res := notifier.Result{HTTPStatus: resp.StatusCode, AnswerCode: apiErr.Code}
	if apiErr.Code != 0 || resp.StatusCode >= 300 {
		res.AnswerMessage = apiErr.Message // a non-JSON 2xx body is no message
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		res.Outcome = notifier.Sent
		return res
	case code == http.StatusTooManyRequests, code == http.StatusInternalServerError,
		code == http.StatusBadGateway, code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		res.Outcome = notifier.Retry
		res.ErrorType = ErrorTypeSwrve
		res.RetryAfter = notifier.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	case code >= 400 && code < 600:
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeSwrve
	default:
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeOther
	}
	res.Err = apiErr
	return res
}

// statusLabel is a status code as a metric label; anything outside the HTTP range
// is one "other", so a broken proxy cannot grow the series without bound.
func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

// apiError reads Swrve's JSON answer, or quotes the start of the body.
func apiError(status int, body []byte) *APIError {
	e := &APIError{HTTPStatus: status}
	var answer struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &answer); err == nil && (answer.Code != 0 || answer.Message != "") {
		e.Code, e.Message = answer.Code, answer.Message
		return e
	}
	if len(body) > errorSnippetBytes {
		body = body[:errorSnippetBytes]
	}
	e.Message = strings.TrimSpace(strings.ToValidUTF8(string(body), ""))
	return e
}

// transportError classifies an error where no answer came back.
func transportError(ctx, attemptCtx context.Context, err error) notifier.Result {
	res := notifier.Result{Outcome: notifier.Retry, Err: fmt.Errorf("posting to Swrve: %w", err)}
	var netErr net.Error
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		res.ErrorType = ErrorTypeCanceled
	case attemptCtx.Err() != nil, errors.As(err, &netErr) && netErr.Timeout():
		res.ErrorType = ErrorTypeTimeout
	default:
		res.ErrorType = ErrorTypeConnection
	}
	return res
}

func failed(errorType string, err error) notifier.Result {
	return notifier.Result{Outcome: notifier.Failed, ErrorType: errorType, Err: err}
}
