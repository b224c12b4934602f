package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/lockstream/lockstream/internal/httpapi"
	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/storage"
)

// PushStore is the part of storage.Postgres the push routes use.
type PushStore interface {
	// CreatePush stores the push and its delivery durably, in one statement.
	CreatePush(ctx context.Context, req storage.PushRequest) (storage.Push, error)
	// GetPush returns the push and its delivery state, or ErrNotFound.
	GetPush(ctx context.Context, id string) (storage.Push, error)
}

// WithPushes serves the standalone push routes (POST /push, POST /v1/pushes,
// GET /v1/pushes/{id}) from store, and the attempt log of GET /v1/pushes/{id}
// from attempts. They also need Config.PushToken; without either they answer
// 503.
func WithPushes(store PushStore, attempts DeliveryAttempts) Option {
	return func(s *Server) {
		s.pushes = store
		s.pushAttempts = attempts
	}
}

// pushMetrics are the push service's instruments, after those the old push
// service exposed over JMX; sends, failures by error type and retries are the
// retrier's lockstream_deliveries_total and lockstream_delivery_attempts_total
// on channel swrve.
type pushMetrics struct {
	receive  *prometheus.HistogramVec
	received *prometheus.CounterVec
}

func newPushMetrics(reg prometheus.Registerer) (*pushMetrics, error) {
	m := &pushMetrics{
		receive: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockstream_push_receive_seconds",
			Help: "Time from receiving a push request to answering it, the push stored durably, by route (legacy = POST /push, v1 = POST /v1/pushes); rejected requests included.",
			// 250µs to about 4s: the old service took 50-200 ms on average.
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15),
		}, []string{"route"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_pushes_received_total",
			Help: "Pushes accepted and stored, by kind: scheduled (with a cron expression) or immediate.",
		}, []string{"kind"}),
	}
	if err := lsmetrics.RegisterAll(reg, m.receive, m.received); err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	for _, kind := range []string{pushKindScheduled, pushKindImmediate} {
		m.received.WithLabelValues(kind)
	}
	return m, nil
}

// The kinds of lockstream_pushes_received_total and routes of
// lockstream_push_receive_seconds.
const (
	pushKindScheduled = "scheduled"
	pushKindImmediate = "immediate"
	pushRouteLegacy   = "legacy"
	pushRouteV1       = "v1"
)

// cronParser reads cron expressions: five fields, or six with seconds first,
// or a descriptor (@daily, @every 1h30m); a CRON_TZ=<zone> (or TZ=) prefix sets
// the zone, UTC otherwise.
func cronParser() cron.Parser {
	return cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
}

// PushWindow returns when a push received at received with the cron expression
// expr is due: the expression's first activation after received (its window
// opens then; the push is sent once, not at every activation). An invalid
// expression, or one that never activates (30 February), is an error.
func PushWindow(expr string, received time.Time) (time.Time, error) {
	schedule, err := cronParser().Parse(expr)
	if err != nil {
		return time.Time{}, err
	}
	next := schedule.Next(received)
	if next.IsZero() {
		return time.Time{}, errors.New("the expression never activates")
	}
	return next, nil
}

// pushRequestBody is the body of POST /push and POST /v1/pushes: the legacy push
// service's, field names included.
type pushRequestBody struct {
	Platform            *string `json:"platform"`
	MessagePrototypeKey *string `json:"messagePrototypeKey"`
	PushKey             *string `json:"pushKey"`
	Message             *string `json:"message"`
	// CronExpression absent, null or empty sends the push at once.
	CronExpression *string `json:"cronExpression"`
}

// pushBody is a push as GET /v1/pushes/{id} and POST /v1/pushes show it: the
// request's members under their request names, the delivery's in the API's
// snake_case.
type pushBody struct {
	ID                  string  `json:"id"`
	Platform            string  `json:"platform"`
	MessagePrototypeKey string  `json:"messagePrototypeKey"`
	PushKey             string  `json:"pushKey"`
	Message             string  `json:"message"`
	CronExpression      *string `json:"cronExpression"`
	State               string  `json:"state"`
	// Attempts counts the attempts made so far.
	Attempts      int        `json:"attempts"`
	ReceivedAt    time.Time  `json:"received_at"`
	WindowAt      time.Time  `json:"window_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	LastError     *string    `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// pushAttemptBody is one send attempt of a push.
type pushAttemptBody struct {
	Attempt    int     `json:"attempt"`
	Status     string  `json:"status"`
	DurationMS int64   `json:"duration_ms"`
	ErrorType  *string `json:"error_type"`
	// HTTPStatus is the status Swrve answered; null when no answer came.
	HTTPStatus *int `json:"http_status"`
	// SwrveCode and SwrveMessage are the code and message of Swrve's JSON
	// answer ({"code":200,"message":"OK"}); null when the answer had none.
	SwrveCode    *int    `json:"swrve_code"`
	SwrveMessage *string `json:"swrve_message"`
	// Error says what went wrong; null for a sent attempt.
	Error *string `json:"error"`
	// At is when the attempt ended, to the second.
	At time.Time `json:"at"`
}

// pushDetailBody is the answer of GET /v1/pushes/{id}.
type pushDetailBody struct {
	pushBody
	AttemptLog []pushAttemptBody `json:"attempt_log"`
}

func renderPush(p storage.Push) pushBody {
	body := pushBody{
		ID:                  p.ID,
		Platform:            string(p.Platform),
		MessagePrototypeKey: p.MessagePrototypeKey,
		PushKey:             p.PushKey,
		Message:             p.Message,
		CronExpression:      nullable(p.CronExpression),
		State:               string(p.State),
		Attempts:            p.Attempts,
		ReceivedAt:          p.ReceivedAt.UTC(),
		WindowAt:            p.WindowAt.UTC(),
		LastError:           nullable(p.LastError),
		CreatedAt:           p.CreatedAt.UTC(),
		UpdatedAt:           p.UpdatedAt.UTC(),
	}
	switch p.State {
	case storage.DeliveryScheduled, storage.DeliveryPending, storage.DeliveryRetry:
		next := p.NextAttemptAt.UTC()
		body.NextAttemptAt = &next
	}
	return body
}

// checkPush validates a push request, naming every bad field, and returns what
// to store for a push received at received.
func checkPush(req pushRequestBody, received time.Time) (storage.PushRequest, error) {
	var errs httpapi.FieldErrors
	out := storage.PushRequest{ReceivedAt: received, WindowAt: received}
	switch {
	case req.Platform == nil:
		errs.Add("platform", "is required")
	case *req.Platform != string(storage.PlatformIOS) && *req.Platform != string(storage.PlatformAndroid):
		errs.Add("platform", "must be IOS or ANDROID, got %q", *req.Platform)
	default:
		out.Platform = storage.Platform(*req.Platform)
	}
	required := func(field string, v *string) string {
		if v == nil || strings.TrimSpace(*v) == "" {
			errs.Add(field, "is required and must not be blank")
			return ""
		}
		return *v
	}
	out.MessagePrototypeKey = required("messagePrototypeKey", req.MessagePrototypeKey)
	out.PushKey = required("pushKey", req.PushKey)
	out.Message = required("message", req.Message)
	if req.CronExpression != nil && strings.TrimSpace(*req.CronExpression) != "" {
		expr := strings.TrimSpace(*req.CronExpression)
		window, err := PushWindow(expr, received)
		if err != nil {
			errs.Add("cronExpression", "is not a valid cron expression (5 fields, or 6 with seconds first, or a descriptor such as @daily; CRON_TZ=<zone> prefix allowed): %v", err)
		} else {
			out.CronExpression, out.WindowAt = expr, window
		}
	}
	if err := errs.Err(); err != nil {
		return storage.PushRequest{}, err
	}
	return out, nil
}

// receivePush decodes, validates and stores a push, and counts it. It is the
// whole of POST /push and POST /v1/pushes but for the answer.
func (s *Server) receivePush(w http.ResponseWriter, r *http.Request, route string) (storage.Push, error) {
	received := s.cfg.Now()
	defer func() { s.pushMetrics.receive.WithLabelValues(route).Observe(time.Since(received).Seconds()) }()
	if s.pushes == nil {
		return storage.Push{}, pushesDisabled()
	}
	var body pushRequestBody
	if err := s.decodeJSON(w, r, &body); err != nil {
		return storage.Push{}, err
	}
	req, err := checkPush(body, received)
	if err != nil {
		return storage.Push{}, err
	}
	push, err := s.pushes.CreatePush(r.Context(), req)
	if err != nil {
		return storage.Push{}, fmt.Errorf("storing push: %w", err)
	}
	kind := pushKindImmediate
	if req.Scheduled() {
		kind = pushKindScheduled
	}
	s.pushMetrics.received.WithLabelValues(kind).Inc()
	return push, nil
}

// legacyPush handles POST /push, the old push service's route: 200 with an
// empty body once the push is stored.
func (s *Server) legacyPush(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.receivePush(w, r, pushRouteLegacy); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// createPush handles POST /v1/pushes: 201 with the push once it is stored.
func (s *Server) createPush(w http.ResponseWriter, r *http.Request) error {
	push, err := s.receivePush(w, r, pushRouteV1)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/pushes/"+url.PathEscape(push.ID))
	return httpapi.WriteJSON(w, http.StatusCreated, renderPush(push))
}

// getPush handles GET /v1/pushes/{id}: the push, its state and every attempt
// recorded in ClickHouse, which can trail the state by the retrier's flush
// interval.
func (s *Server) getPush(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if !validDeliveryID(id) {
		return httpapi.NotFound("push %q not found: a push id is a UUID", id)
	}
	if s.pushes == nil {
		return pushesDisabled()
	}
	if s.pushAttempts == nil {
		return unavailable("push attempts are unavailable: the server has no ClickHouse store")
	}
	push, err := s.pushes.GetPush(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return httpapi.NotFound("push %q not found", id)
	}
	if err != nil {
		return fmt.Errorf("getting push: %w", err)
	}
	attempts, err := s.pushAttempts.DeliveryAttempts(r.Context(), push.ID)
	if err != nil {
		return fmt.Errorf("reading attempts of push: %w", err)
	}
	body := pushDetailBody{pushBody: renderPush(push), AttemptLog: make([]pushAttemptBody, 0, len(attempts))}
	for _, a := range attempts {
		body.AttemptLog = append(body.AttemptLog, pushAttemptBody{
			Attempt:      a.Attempt,
			Status:       string(a.Status),
			DurationMS:   a.Duration.Milliseconds(),
			ErrorType:    nullable(a.ErrorType),
			HTTPStatus:   nullable(a.HTTPStatus),
			SwrveCode:    nullable(a.AnswerCode),
			SwrveMessage: nullable(a.AnswerMessage),
			Error:        nullable(a.Error),
			At:           a.At.UTC(),
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// pushesDisabled is the 503 of the push routes on a server built without
// WithPushes.
func pushesDisabled() error {
	return unavailable("pushes are disabled: the server has no push store")
}
