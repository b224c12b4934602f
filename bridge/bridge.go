// Package bridge holds what lockstream's intake bridges share: bridge/amqp
// (RabbitMQ) and bridge/mqtt (Mosquitto and other MQTT 5 brokers) take readings
// from a message broker into the Kafka pipeline, and acknowledge a message to its
// broker only once Kafka acknowledged what the message became.
//
// This package turns a message into Kafka records (readings for
// lockstream.readings, bad input for lockstream.readings.dlq with the reason), says
// which errors are worth a redelivery (Recoverable) and which are not
// (Unrecoverable), counts what happens (Metrics), and mails an operator about
// unrecoverable messages at most once per interval (Alerter).
package bridge

import (
	"errors"
	"fmt"
)

// Unrecoverable is an error no redelivery can cure: bad JSON, a reading that fails
// validation, an unknown member. The bridge acknowledges the message, keeps it in
// the DLQ with Reason, counts it and reports it.
type Unrecoverable struct {
	// Reason is a stable code: a reading's rejection reason (not_json, bad_data, …)
	// or a handler's own (notification_unavailable, unknown_member, …). It labels
	// metrics and goes into the DLQ's "error" header.
	Reason string
	// Detail says what exactly, for people; it goes into the "detail" header.
	Detail string
}

func (e *Unrecoverable) Error() string {
	return fmt.Sprintf("unrecoverable (%s): %s", e.Reason, e.Detail)
}

// Reject returns an *Unrecoverable error.
func Reject(reason, format string, args ...any) error {
	return &Unrecoverable{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Recoverable is an error that may pass: a store or Kafka down, a timeout. The
// bridge leaves the message unacknowledged and has it delivered again after a
// pause. Any error that is not an *Unrecoverable is treated as recoverable; this
// type only makes the intent explicit.
type Recoverable struct {
	Err error
}

func (e *Recoverable) Error() string { return "recoverable: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Recoverable) Unwrap() error { return e.Err }

// Retry wraps err as a *Recoverable error; nil stays nil.
func Retry(err error) error {
	if err == nil {
		return nil
	}
	return &Recoverable{Err: err}
}

// AsUnrecoverable returns the *Unrecoverable in err's chain, if any.
func AsUnrecoverable(err error) (*Unrecoverable, bool) {
	var u *Unrecoverable
	if errors.As(err, &u) {
		return u, true
	}
	return nil, false
}
