// Package webhook delivers notifications to client systems as signed HTTP POSTs
// in the Standard Webhooks format (https://www.standardwebhooks.com): the JSON body
// of DESIGN.md and the webhook-id, webhook-timestamp and webhook-signature headers.
//
// A Sender makes one attempt per Send and classifies it; retrying is the retrier's
// job. It never follows redirects, reads at most MaxResponseBytes of a response,
// limits how many requests run at once against one endpoint (so one slow client
// cannot hold every worker), and, unless AllowPrivate is set, refuses to connect to
// loopback, private, link-local and other non-public addresses, checked after DNS
// resolution on every dial.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
)

// Config defaults.
const (
	DefaultTimeout                = 15 * time.Second
	DefaultPerEndpointConcurrency = 64
	DefaultMaxResponseBytes       = 64 << 10
)

// The ErrorType values of the results Send returns.
const (
	ErrorTypeInvalidURL   = "INVALID_URL"   // Failed: not an http(s) URL with a host
	ErrorTypeSecret       = "SECRET"        // Failed: the client's secret cannot be decoded
	ErrorTypeEncoding     = "ENCODING"      // Failed: the body cannot be encoded
	ErrorTypeSSRF         = "SSRF"          // Failed: the URL leads to a non-public address
	ErrorTypeEndpointBusy = "ENDPOINT_BUSY" // Retry: ctx ended while waiting for a slot to the endpoint
	ErrorTypeTimeout      = "TIMEOUT"       // Retry: no answer within Timeout (or ctx's deadline)
	ErrorTypeCanceled     = "CANCELED"      // Retry: the caller cancelled ctx (shutdown)
	ErrorTypeConnection   = "CONNECTION"    // Retry: refused, reset, TLS or DNS failure
	ErrorTypeHTTPStatus   = "HTTP_STATUS"   // Retry on 408/429/5xx, Failed on other non-2xx
	ErrorTypeRedirect     = "REDIRECT"      // Failed: a 3xx (redirects are not followed)
	ErrorTypeAborted      = "ABORTED"       // Failed: the receiver answered webhook-delivery: abort-message
)

// errorSnippetBytes bounds how much of a failed response's body goes into the error.
const errorSnippetBytes = 256

// Config configures a Sender.
type Config struct {
	// Timeout bounds one attempt: connecting, sending, and reading the response.
	// Defaults to DefaultTimeout (15s), the Standard Webhooks recommendation.
	Timeout time.Duration
	// AllowPrivate lets webhooks reach loopback, private, link-local and other
	// non-public addresses. Only for tests and the local demo. Defaults to false.
	AllowPrivate bool
	// PerEndpointConcurrency caps the requests in flight to one endpoint (scheme,
	// host and port); further sends to it wait for a free slot.
	// Defaults to DefaultPerEndpointConcurrency (64; 4 capped one client near 250 webhooks/s).
	PerEndpointConcurrency int
	// MaxResponseBytes caps how much of a response body is read; the rest is
	// discarded with the connection. Defaults to DefaultMaxResponseBytes (64 KiB).
	MaxResponseBytes int64
	// Now returns the current time: the webhook-timestamp, and whether a previous
	// secret is still kept (Target.PreviousSecretUntil). Tests inject a clock.
	// Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns the config with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.PerEndpointConcurrency = cmp.Or(c.PerEndpointConcurrency, DefaultPerEndpointConcurrency)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Timeout <= 0:
		return fmt.Errorf("webhook config: Timeout must be positive, got %s", c.Timeout)
	case c.PerEndpointConcurrency <= 0:
		return fmt.Errorf("webhook config: PerEndpointConcurrency must be positive, got %d", c.PerEndpointConcurrency)
	case c.MaxResponseBytes <= 0:
		return fmt.Errorf("webhook config: MaxResponseBytes must be positive, got %d", c.MaxResponseBytes)
	}
	return nil
}

// Target is where one client's webhooks go and how they are signed.
type Target struct {
	// URL is the client's webhook URL, http or https.
	URL string
	// Secret is the client's signing secret, "whsec_" followed by base64.
	Secret string
	// PreviousSecret is the secret Secret replaced, kept until
	// PreviousSecretUntil: until then webhooks carry a signature by each (Standard
	// Webhooks' space-separated list), so a receiver that still has only the old
	// secret, or already only the new one, verifies them. Empty when none is kept.
	PreviousSecret      string
	PreviousSecretUntil time.Time
}

// Body is the JSON a client system receives: the client's shape of the event
// (event.ClientEvent) and the attempt's number.
type Body struct {
	event.ClientEvent
	Attempt int `json:"attempt"`
}

// NewBody returns the body a notification is delivered with.
func NewBody(n notifier.Notification) Body {
	return Body{ClientEvent: event.ClientEvent{
		ID:       n.EventID,
		Type:     n.Type,
		Sensor:   event.SensorRef{ID: n.SensorID, Address: n.SensorAddress},
		Data:     n.Data,
		Previous: n.Previous,
		At:       n.At.UTC(),
		Severity: cmp.Or(n.Severity, event.SeverityOf(n.Type, n.Data)),
		Seq:      n.Seq,
		Site:     n.Site,
		Sensors:  n.Sensors,
		// The outage a connection_restored ends.
		LostSince:     utcPtr(n.LostSince),
		SilentSeconds: event.SilentSeconds(n.LostSince, n.At),
		IncidentID:    event.IncidentOf(n.EventID),
	}, Attempt: n.Attempt}
}

// utcPtr is t in UTC, or nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Sender posts notifications to webhooks. It is safe for concurrent use.
type Sender struct {
	cfg       Config
	logger    *slog.Logger
	transport *http.Transport
	client    *http.Client

	mu        sync.Mutex
	endpoints map[string]*endpoint
}

// endpoint is the concurrency limit of one scheme+host+port. It is dropped from
// Sender.endpoints when nobody uses it, so the map stays as small as the set of
// endpoints being called right now.
type endpoint struct {
	slots chan struct{}
	users int // sends holding or waiting for a slot; guarded by Sender.mu
}

// New returns a Sender. logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Sender, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if !cfg.AllowPrivate {
		dial = newAddressGuard(dialer).dialContext
	}
	transport := &http.Transport{
		// No proxy from the environment: the address guard must see the real
		// destination, not a proxy's.
		Proxy:                 nil,
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   cfg.PerEndpointConcurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &Sender{
		cfg:       cfg,
		logger:    logger,
		transport: transport,
		client: &http.Client{
			Transport: transport,
			// A 3xx fails the attempt: following it would call a URL the client
			// never registered (and could lead past the address guard's intent).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		endpoints: make(map[string]*endpoint),
	}, nil
}

// Close releases idle connections. Sends may still run; they open new ones.
func (s *Sender) Close() {
	s.transport.CloseIdleConnections()
}

// Send makes one delivery attempt of n to target and classifies it. 2xx is Sent;
// 408, 429, 5xx, timeouts and connection errors are Retry (with the receiver's
// Retry-After); other statuses, redirects, bad URLs and refused addresses are
// Failed. A send waits for a free slot to the endpoint first; if ctx ends while
// waiting, the result is Retry with ErrorType ENDPOINT_BUSY.
func (s *Sender) Send(ctx context.Context, target Target, n notifier.Notification) notifier.Result {
	u, err := parseURL(target.URL)
	if err != nil {
		return failed(ErrorTypeInvalidURL, err)
	}
	now := s.cfg.Now()
	keys, err := signingKeys(target, now)
	if err != nil {
		return failed(ErrorTypeSecret, err)
	}
	body, err := json.Marshal(NewBody(n))
	if err != nil {
		// Only a broken Body type gets here; retrying would not help.
		return failed(ErrorTypeEncoding, fmt.Errorf("encoding webhook body: %w", err))
	}

	release, err := s.acquire(ctx, endpointKey(u))
	if err != nil {
		return notifier.Result{
			Outcome:   notifier.Retry,
			Err:       fmt.Errorf("waiting for a free slot to %s: %w", endpointKey(u), err),
			ErrorType: ErrorTypeEndpointBusy,
		}
	}
	defer release()

	start := time.Now()
	res := s.post(ctx, u, keys, n.EventID, body)
	res.Duration = time.Since(start)
	return res
}

// signingKeys returns the HMAC keys a webhook to target is signed with at now: the
// secret's, then the previous secret's while it is kept.
func signingKeys(target Target, now time.Time) ([][]byte, error) {
	key, err := decodeSecret(target.Secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{key}
	if target.PreviousSecret != "" && now.Before(target.PreviousSecretUntil) {
		previous, err := decodeSecret(target.PreviousSecret)
		if err != nil {
			return nil, fmt.Errorf("previous secret: %w", err)
		}
		keys = append(keys, previous)
	}
	return keys, nil
}

// post sends the signed request and classifies what came back.
func (s *Sender) post(ctx context.Context, u *url.URL, keys [][]byte, id string, body []byte) notifier.Result {
	attemptCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(attemptCtx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return failed(ErrorTypeInvalidURL, fmt.Errorf("building webhook request: %w", err))
	}
	now := s.cfg.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lockstream-webhook/1")
	req.Header.Set(HeaderID, id)
	// The same id as an Idempotency-Key makes the POST replayable to net/http:
	// when a kept-alive connection turns out closed by the receiver (EOF on a
	// reused connection, the keep-alive race), the transport sends it again on
	// a new one at once. Without it that attempt failed and the webhook waited
	// for the retry back-off: one such EOF held a bench phase for 8 minutes
	// (bench/RESULTS.md, 2026-11-28). A receiver that saw the first copy
	// dedupes the second by webhook-id, as after any retry.
	req.Header.Set("Idempotency-Key", id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	sigs := make([]string, len(keys))
	for i, key := range keys {
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac(key, id, now.Unix(), body))
	}
	req.Header.Set(HeaderSignature, strings.Join(sigs, " "))

	resp, err := s.client.Do(req)
	if err != nil {
		return s.transportError(ctx, attemptCtx, u, err)
	}
	defer resp.Body.Close()
	// Read (a capped amount of) the body so the connection can be reused and the
	// error can quote the receiver; a body larger than the cap is cut off. A read
	// error is deliberately not reported: the status line alone decides the
	// outcome, and a 2xx whose body broke off was still accepted.
	head, _ := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes))

	res := notifier.Result{HTTPStatus: resp.StatusCode}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		res.Outcome = notifier.Sent
		return res
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		res.Outcome = notifier.Retry
		res.ErrorType = ErrorTypeHTTPStatus
		res.RetryAfter = notifier.ParseRetryAfter(resp.Header.Get("Retry-After"), s.cfg.Now())
	case code >= 300 && code < 400:
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeRedirect
	default:
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeHTTPStatus
	}
	res.Err = statusError(resp, head)
	if strings.EqualFold(strings.TrimSpace(resp.Header.Get(HeaderDelivery)), AbortMessage) {
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeAborted
		res.Abort = true
		res.RetryAfter = 0
		res.Err = fmt.Errorf("receiver asked to abort the message: %w", res.Err)
	}
	return res
}

// transportError classifies an error where no response came back.
func (s *Sender) transportError(ctx, attemptCtx context.Context, u *url.URL, err error) notifier.Result {
	res := notifier.Result{Outcome: notifier.Retry, Err: fmt.Errorf("posting webhook to %s: %w", redact(u), err)}
	var netErr net.Error
	switch {
	case errors.Is(err, ErrForbiddenAddress):
		s.logger.Warn("webhook refused: URL leads to a non-public address", "host", u.Host, "error", err)
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeSSRF
	case errors.Is(ctx.Err(), context.Canceled):
		res.ErrorType = ErrorTypeCanceled
	case attemptCtx.Err() != nil, errors.As(err, &netErr) && netErr.Timeout():
		res.ErrorType = ErrorTypeTimeout
	default:
		res.ErrorType = ErrorTypeConnection
	}
	return res
}

// acquire takes a slot of the endpoint's limit, waiting while ctx allows.
func (s *Sender) acquire(ctx context.Context, key string) (release func(), err error) {
	s.mu.Lock()
	ep := s.endpoints[key]
	if ep == nil {
		ep = &endpoint{slots: make(chan struct{}, s.cfg.PerEndpointConcurrency)}
		s.endpoints[key] = ep
	}
	ep.users++
	s.mu.Unlock()

	select {
	case ep.slots <- struct{}{}:
		return func() {
			<-ep.slots
			s.leave(key, ep)
		}, nil
	case <-ctx.Done():
		s.leave(key, ep)
		return nil, ctx.Err()
	}
}

func (s *Sender) leave(key string, ep *endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep.users--
	if ep.users == 0 {
		delete(s.endpoints, key)
	}
}

// parseURL accepts absolute http and https URLs with a host.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parsing webhook URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("webhook URL %s: scheme must be http or https", redact(u))
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("webhook URL %s: no host", redact(u))
	}
	return u, nil
}

// endpointKey names the endpoint a URL is limited under: scheme, host and port.
func endpointKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// redact drops credentials and the query (which may hold tokens) from a URL
// before it goes into an error or a log.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}

// statusError describes a non-2xx answer, quoting the start of its body.
func statusError(resp *http.Response, head []byte) error {
	msg := "webhook answered " + resp.Status
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		msg += " (redirect to " + loc + ", not followed)"
	}
	if len(head) > errorSnippetBytes {
		head = head[:errorSnippetBytes]
	}
	if s := strings.TrimSpace(strings.ToValidUTF8(string(head), "")); s != "" {
		msg += ": " + strconv.Quote(s)
	}
	return errors.New(msg)
}

func failed(errorType string, err error) notifier.Result {
	return notifier.Result{Outcome: notifier.Failed, ErrorType: errorType, Err: err}
}
