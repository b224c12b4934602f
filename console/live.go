package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/metrics"
)

// The live view: one follower of the events topic per API process, started when
// the first viewer connects and stopped a while after the last one left, fans the
// events out to every open view (Server-Sent Events). A view that cannot keep up
// loses events rather than slowing the others: it is told how many.

// viewBuffer is how many events wait for a slow view before it loses some.
const viewBuffer = 256

// livePing keeps proxies from closing an idle stream.
const livePing = 15 * time.Second

// tailRetry is the pause before following the topic again after a failure.
const tailRetry = 2 * time.Second

// errLiveClosed is subscribe's answer once the console stopped.
var errLiveClosed = errors.New("the console is stopping")

// errLiveFull is subscribe's answer when MaxLiveViews are open.
var errLiveFull = errors.New("too many live views are open")

// liveView is one open live view.
type liveView struct {
	events  chan event.Event
	mu      sync.Mutex
	dropped int
}

// hub fans the followed events out to the open views.
type hub struct {
	cfg    Config
	tail   EventTail
	logger *slog.Logger
	views  prometheus.Gauge
	drops  prometheus.Counter

	mu      sync.Mutex
	open    map[*liveView]struct{}
	closed  bool
	stop    context.CancelFunc // ends the follower; nil when none runs
	linger  *time.Timer
	stopped chan struct{} // closed when the current follower returned
}

func newHub(cfg Config, tail EventTail, reg prometheus.Registerer, logger *slog.Logger) (*hub, error) {
	h := &hub{cfg: cfg, tail: tail, logger: logger, open: map[*liveView]struct{}{},
		views: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockstream_console_live_views",
			Help: "Live event views of the operator console open on this process.",
		}),
		drops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_console_live_dropped_total",
			Help: "Events a live view of the console lost because it did not keep up.",
		}),
	}
	if err := metrics.RegisterAll(reg, h.views, h.drops); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return h, nil
}

// subscribe opens a view, starting the follower when none runs.
func (h *hub) subscribe() (*liveView, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, errLiveClosed
	case len(h.open) >= h.cfg.MaxLiveViews:
		return nil, errLiveFull
	}
	v := &liveView{events: make(chan event.Event, viewBuffer)}
	h.open[v] = struct{}{}
	h.views.Set(float64(len(h.open)))
	if h.linger != nil {
		h.linger.Stop()
		h.linger = nil
	}
	if h.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop, h.stopped = cancel, make(chan struct{})
		go h.follow(ctx, h.stopped)
	}
	return v, nil
}

// unsubscribe closes a view; the follower stops LiveLinger after the last one.
func (h *hub) unsubscribe(v *liveView) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.open[v]; !ok {
		return // close() took it already
	}
	delete(h.open, v)
	close(v.events)
	h.views.Set(float64(len(h.open)))
	if len(h.open) == 0 && h.stop != nil && h.linger == nil {
		h.linger = time.AfterFunc(h.cfg.LiveLinger, h.stopIfIdle)
	}
}

func (h *hub) stopIfIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.linger = nil
	if len(h.open) == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// follow runs the tail until ctx ends, starting again after failures.
func (h *hub) follow(ctx context.Context, stopped chan struct{}) {
	defer close(stopped)
	since := h.cfg.Now().Add(-h.cfg.LiveBacklog)
	for {
		err := h.tail.TailEvents(ctx, since, h.broadcast)
		if ctx.Err() != nil {
			return
		}
		h.logger.WarnContext(ctx, "console: following the events topic failed; trying again", "err", err)
		since = h.cfg.Now().Add(-tailRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(tailRetry):
		}
	}
}

// broadcast hands e to every open view without waiting for any.
func (h *hub) broadcast(e event.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for v := range h.open {
		select {
		case v.events <- e:
		default:
			v.mu.Lock()
			v.dropped++
			v.mu.Unlock()
			h.drops.Inc()
		}
	}
}

// close ends every view and the follower, and waits for the follower.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	for v := range h.open {
		delete(h.open, v)
		close(v.events)
	}
	h.views.Set(0)
	if h.linger != nil {
		h.linger.Stop()
	}
	stopped := h.stopped
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	h.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
}

// liveData is the live page.
type liveData struct {
	Available bool
	Sensor    string
}

// livePage shows the live view; live.js fills it from /console/live/events.
func (c *Console) livePage(w http.ResponseWriter, r *http.Request, s *session) error {
	sensor := r.URL.Query().Get("sensor")
	if sensor != "" && !sensorIDPattern.MatchString(sensor) {
		return errorf(http.StatusBadRequest, "A sensor id is 1 to 16 letters or digits.")
	}
	c.render(w, r, http.StatusOK, "live", view{Title: "Live events", Active: "live", Session: s,
		Data: liveData{Available: c.deps.Events != nil, Sensor: sensor}})
	return nil
}

// liveEvent is an event as the live view receives it: as lockstream.events
// carried it, with its state named.
type liveEvent struct {
	event.Event
	// State names data: locked, unlocked.
	State string `json:"state"`
}

// liveEvents streams events as Server-Sent Events: "event: ready" once the view is
// open, "event: event" with each event (optionally of one sensor), "event: dropped"
// with a count when the view lost some, and a ": ping" comment every 15 s.
func (c *Console) liveEvents(w http.ResponseWriter, r *http.Request, _ *session) error {
	if c.deps.Events == nil {
		return errorf(http.StatusServiceUnavailable, "The live view needs Kafka (LOCKSTREAM_KAFKA_BROKERS).")
	}
	sensor := r.URL.Query().Get("sensor")
	if sensor != "" && !sensorIDPattern.MatchString(sensor) {
		return errorf(http.StatusBadRequest, "A sensor id is 1 to 16 letters or digits.")
	}
	v, err := c.live.subscribe()
	if err != nil {
		return errorf(http.StatusServiceUnavailable, "The live view is not available: %v.", err)
	}
	defer c.live.unsubscribe(v)

	rc := http.NewResponseController(w)
	// A server-wide write timeout must not cut the stream; not every writer can lift it.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(format string, args ...any) error {
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send("retry: 2000\nevent: ready\ndata: {}\n\n"); err != nil {
		return nil // the viewer left
	}
	ping := time.NewTicker(livePing)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-ping.C:
			if send(": ping\n\n") != nil {
				return nil
			}
		case e, ok := <-v.events:
			if !ok {
				return nil // the console stops
			}
			if err := c.sendEvent(send, v, e, sensor); err != nil {
				return nil
			}
		}
	}
}

// sendEvent writes one event to a view (with its count of lost events first).
func (c *Console) sendEvent(send func(string, ...any) error, v *liveView, e event.Event, sensor string) error {
	v.mu.Lock()
	dropped := v.dropped
	v.dropped = 0
	v.mu.Unlock()
	if dropped > 0 {
		if err := send("event: dropped\ndata: %d\n\n", dropped); err != nil {
			return err
		}
	}
	if sensor != "" && e.SensorID != sensor {
		return nil
	}
	e.At = e.At.UTC()
	b, err := json.Marshal(liveEvent{Event: e, State: stateName(e.Data)})
	if err != nil {
		return err
	}
	return send("id: %s\nevent: event\ndata: %s\n\n", e.ID, b)
}
