package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockstream/lockstream/notifier"
)

// DefaultAlertInterval is the least time between two alert emails.
const DefaultAlertInterval = time.Minute

// maxAlertExamples bounds the rejected messages one alert describes; the counts
// cover them all.
const maxAlertExamples = 10

// Mailer sends one plain-text email (notifier/email.Sender).
type Mailer interface {
	SendText(ctx context.Context, to, subject, text string) notifier.Result
}

// AlertConfig configures an Alerter.
type AlertConfig struct {
	// To is the operator's address (LOCKSTREAM_ALERT_EMAIL). Empty turns alerts
	// off: Report does nothing.
	To string
	// Bridge names the bridge in the subject ("amqp").
	Bridge string
	// Interval is the least time between two emails; what happens in between is
	// counted into the next one. Defaults to DefaultAlertInterval (1m).
	Interval time.Duration
}

// Alerter mails an operator about unrecoverable messages: at most one email per
// Interval, carrying how many there were since the last one, by reason, and a few
// of them. The first one after a quiet Interval goes out at once. It is safe for
// concurrent use; Run sends.
type Alerter struct {
	cfg    AlertConfig
	mailer Mailer
	logger *slog.Logger
	wake   chan struct{}

	mu       sync.Mutex
	counts   map[string]int
	examples []string
}

// NewAlerter returns an Alerter; with cfg.To empty or a nil mailer it is off.
// logger may be nil.
func NewAlerter(cfg AlertConfig, mailer Mailer, logger *slog.Logger) *Alerter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultAlertInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if mailer == nil {
		cfg.To = ""
	}
	return &Alerter{cfg: cfg, mailer: mailer, logger: logger, wake: make(chan struct{}, 1), counts: map[string]int{}}
}

// Report counts one unrecoverable message for the next email. It never blocks.
func (a *Alerter) Report(reason, detail, source string) {
	if a.cfg.To == "" {
		return
	}
	a.mu.Lock()
	a.counts[reason]++
	if len(a.examples) < maxAlertExamples {
		a.examples = append(a.examples, fmt.Sprintf("%s  %s: %s", source, reason, truncate(detail, 200)))
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run sends the emails until ctx is cancelled; it returns nil then. A failed
// email keeps its counts for the next one, an Interval later.
func (a *Alerter) Run(ctx context.Context) error {
	if a.cfg.To == "" {
		<-ctx.Done()
		return nil
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			a.dropPending(ctx)
			return nil
		case <-a.wake:
		}
		if wait := time.Until(last.Add(a.cfg.Interval)); !last.IsZero() && wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				a.dropPending(ctx)
				return nil
			case <-timer.C:
			}
		}
		counts, examples := a.take()
		if len(counts) == 0 {
			continue
		}
		res := a.mailer.SendText(ctx, a.cfg.To, subject(a.cfg.Bridge, counts), body(a.cfg.Bridge, counts, examples))
		// Counted from the end of the conversation, so that the next email
		// reaches the server at least Interval after this one did.
		last = time.Now()
		if res.Outcome != notifier.Sent {
			a.logger.WarnContext(ctx, "alert email failed; its counts go into the next one", "to", a.cfg.To, "err", res.Err)
			a.putBack(counts, examples)
		}
	}
}

// take returns and resets what was reported since the last email.
func (a *Alerter) take() (map[string]int, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	counts, examples := a.counts, a.examples
	a.counts, a.examples = map[string]int{}, nil
	return counts, examples
}

// putBack returns the counts of a failed email and schedules another try.
func (a *Alerter) putBack(counts map[string]int, examples []string) {
	a.mu.Lock()
	for r, n := range counts {
		a.counts[r] += n
	}
	a.examples = append(examples, a.examples...)[:min(maxAlertExamples, len(examples)+len(a.examples))]
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *Alerter) dropPending(ctx context.Context) {
	if counts, _ := a.take(); len(counts) > 0 {
		a.logger.WarnContext(context.WithoutCancel(ctx), "stopping with unrecoverable messages not yet mailed", "counts", counts)
	}
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func subject(bridge string, counts map[string]int) string {
	n := total(counts)
	if n == 1 {
		return fmt.Sprintf("lockstream %s bridge: 1 unrecoverable message", bridge)
	}
	return fmt.Sprintf("lockstream %s bridge: %d unrecoverable messages", bridge, n)
}

func body(bridge string, counts map[string]int, examples []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The %s bridge acknowledged %d message(s) it could not use since its last alert.\n", bridge, total(counts))
	b.WriteString("Each is kept in the DLQ topic (lockstream.readings.dlq) with its reason in the \"error\" header.\n\nBy reason:\n")
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, "  %-28s %d\n", r, counts[r])
	}
	if len(examples) > 0 {
		fmt.Fprintf(&b, "\nThe first %d:\n", len(examples))
		for _, e := range examples {
			b.WriteString("  " + e + "\n")
		}
	}
	return b.String()
}
