// Package notifier holds what every delivery channel shares: the notification the
// retrier hands to a channel, and the result the channel hands back. The channels
// themselves live in sub-packages (webhook, email); they send one attempt and
// classify its outcome, while scheduling, back-off and bookkeeping stay with the
// retrier.
package notifier

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockstream/lockstream/event"
)

// Outcome is how one delivery attempt ended, as the retrier acts on it.
type Outcome int

// The outcomes of an attempt. They start at 1 so that a zero Result is not
// mistaken for a successful one.
const (
	// Sent means the receiver accepted the notification; the delivery is done.
	Sent Outcome = iota + 1
	// Retry means the attempt failed in a way that may pass later (timeouts,
	// connection errors, 408/429/5xx, SMTP 4xx); the retrier schedules another.
	Retry
	// Failed means another attempt would fail the same way (4xx, SMTP 5xx, a
	// refused address); the delivery is given up without further attempts.
	Failed
)

// String returns the delivery state the outcome leads to, as stored in the outbox.
func (o Outcome) String() string {
	switch o {
	case Sent:
		return "SENT"
	case Retry:
		return "RETRY"
	case Failed:
		return "FAILED"
	}
	return "UNKNOWN"
}

// Result describes one delivery attempt.
type Result struct {
	Outcome Outcome
	// HTTPStatus is the receiver's status code for HTTP channels; 0 when no response
	// came back (or the channel is not HTTP).
	HTTPStatus int
	// RetryAfter is the delay the receiver asked for before the next attempt
	// (HTTP Retry-After); 0 means it asked for none.
	RetryAfter time.Duration
	// Err says what went wrong; nil when Outcome is Sent.
	Err error
	// ErrorType is a short, stable, upper-case class of Err (for example TIMEOUT,
	// CONNECTION, HTTP_STATUS, SSRF, SMTP_PERMANENT), fit for metrics labels and
	// the delivery_attempts table; empty when Outcome is Sent.
	ErrorType string
	// AnswerCode and AnswerMessage are the code and message the receiver put in
	// its answer body, for receivers whose answers carry them (Swrve's
	// {"code":200,"message":"OK"}); 0 and empty otherwise. The attempt log keeps
	// them because they say more than the HTTP status.
	AnswerCode    int
	AnswerMessage string
	// Duration is how long the attempt took on the wire.
	Duration time.Duration
	// Abort is set when the receiver asked that this notification never be
	// re-sent (the webhook response header "webhook-delivery: abort-message").
	// An aborted result is always Failed.
	Abort bool
}

// Notification is one notification for one client on one channel, as the retrier
// hands it to a sender.
type Notification struct {
	// ID is the notification's id; email derives its Message-ID from it.
	ID string
	// EventID is the id of the event the notification is about. Webhooks carry it
	// as webhook-id and body id, so every attempt of the same event carries the
	// same id and receivers can drop duplicates.
	EventID string
	// Type is the event type: state_changed, connection_lost,
	// connection_restored, sensor_open_too_long, ...
	Type event.Type
	// SensorID and SensorAddress name the sensor and where it is.
	SensorID      string
	SensorAddress string
	// Data is the sensor's new state (1 = locked, 0 = unlocked) for state_changed,
	// and its last known state, if any, for the connection events.
	Data *int
	// Previous is the state before a state_changed; nil for a sensor's first reading.
	Previous *int
	// At is when the event happened.
	At time.Time
	// Severity grades the event: critical, warning or info (event.SeverityOf).
	Severity event.Severity
	// Seq is the notification's number in its client's sequence (1, 2, 3…, no
	// gap); 0 when it has none.
	Seq int64
	// Site and Sensors are a site event's site and the sensors it lists.
	Site    string
	Sensors []string
	// Attempt is this attempt's number, starting at 1.
	Attempt int
	// LostSince, on a connection_restored, is the sensor's last reading before
	// the loss it ends; nil otherwise (event.SilentSeconds gives the outage).
	LostSince *time.Time
}

// Unseen is an escalation email to a member: the messages it has not seen, of
// one episode (a sensor, or a free-form type) or of a digest.
type Unseen struct {
	// ID is the delivery's id; email derives its Message-ID from it.
	ID string
	// Digest tells a digest from an episode's email.
	Digest bool
	// Notification marks the email of one free-form notification, sent as it
	// arrived (POST /v1/notifications with "email": true), not an escalation.
	Notification bool
	MemberName   string
	// Timezone is the member's IANA zone: times are shown in it.
	Timezone string
	// Messages are newest first.
	Messages []UnseenMessage
}

// UnseenMessage is one message an Unseen email lists.
type UnseenMessage struct {
	// Type is the event type, or the free-form notification's type.
	Type string
	// SensorID and SensorAddress are empty for a free-form notification, whose
	// Subject says what it is about.
	SensorID      string
	SensorAddress string
	// SensorSite is the sensor's site, empty when it has none: a site event
	// names it.
	SensorSite string
	Subject    string
	// Severity is info, warning or critical.
	Severity string
	Data     *int
	Previous *int
	At       time.Time
	// AckURL is an incident reminder's one-click ack link (its message's
	// ack_url); empty for other messages.
	AckURL string
}

// ParseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date; 0 if
// absent, invalid or in the past. Every channel that
// speaks HTTP honours it the same way.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Cap at 100 years so a huge value cannot overflow time.Duration.
		return time.Duration(min(secs, 100*365*24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
