package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// The states of an incident: open → acknowledged → resolved (open → resolved
// too).
const (
	IncidentOpen         = "open"
	IncidentAcknowledged = "acknowledged"
	IncidentResolved     = "resolved"
)

// IncidentReminder is the inbox message type of an incident reminder. A
// reminder brings its own email and push (as the member's preferences say)
// and repeats until the incident is acknowledged, so it opens no escalation
// episode: escalating it too would notify twice.
const IncidentReminder = "incident_reminder"

// Incident is a problem of one client's subject (a sensor or a site) that its
// members own until it is resolved (docs/DESIGN.md "Incidents"). The incident
// box keeps them; the API shows them.
type Incident struct {
	ID       string
	ClientID string
	// Subject is "sensor:<id>" or "site:<name>"; SensorID or Site says which.
	Subject  string
	SensorID string
	Site     string
	State    string
	Severity string
	// Type and EventID are the event that opened it.
	Type     string
	EventID  string
	OpenedAt time.Time
	// Events counts the events attached, the opening one included.
	Events         int
	LastEventAt    time.Time
	AcknowledgedAt *time.Time
	AcknowledgedBy string
	ResolvedAt     *time.Time
	ResolvedBy     string
	// ResolvedEvent is the id of the clearing event that resolved it.
	ResolvedEvent string
	// Timeline is filled by a read of one incident, oldest first.
	Timeline []IncidentEntry
}

// Duration is how long the incident lasted: to its resolve, else to now.
func (i Incident) Duration(now time.Time) time.Duration {
	if i.ResolvedAt != nil {
		return i.ResolvedAt.Sub(i.OpenedAt)
	}
	return now.Sub(i.OpenedAt)
}

// The kinds of a timeline entry.
const (
	EntryOpened   = "opened"
	EntryAttached = "attached"
	EntryReminder = "reminder"
	EntryAck      = "ack"
	EntryResolve  = "resolve"
)

// IncidentEntry is one line of an incident's timeline: who, when, on which
// channel.
type IncidentEntry struct {
	At       time.Time
	Kind     string
	MemberID string
	Channel  string
	Detail   string
}

// EscalationPolicy says who is reminded of a client's incidents and how
// often; its JSON form is the body of PUT /v1/clients/{id}/escalation-policy.
type EscalationPolicy struct {
	// Severities are the incidents' severities that are escalated.
	Severities []string `json:"severities"`
	// RepeatEvery is how often each member of the tiers reached is reminded.
	RepeatEvery Duration `json:"repeat_every"`
	// Loops bounds the reminders of the last tier.
	Loops int              `json:"loops"`
	Tiers []EscalationTier `json:"tiers"`
}

// EscalationTier is a step of a policy: its members join the reminders After
// the incident opened. No Members (nil) means every member of the client.
type EscalationTier struct {
	After   Duration `json:"after"`
	Members []string `json:"members,omitempty"`
}

// Duration is a time.Duration written as Go writes it ("5m", "1h30m0s").
type Duration time.Duration

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"5m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Limits of a policy.
const (
	MinPolicyDuration = time.Second
	MaxPolicyTiers    = 10
	MaxPolicyLoops    = 1000
)

// DefaultEscalationPolicy is the policy of a client that set none: one tier
// of every member, reminded every 15 minutes, 4 loops, critical incidents.
func DefaultEscalationPolicy() EscalationPolicy {
	return EscalationPolicy{Severities: []string{"critical"}, RepeatEvery: Duration(15 * time.Minute), Loops: 4,
		Tiers: []EscalationTier{{After: 0}}}
}

// Check returns every invalid field of p, named by its JSON path; members
// (ids of the client's members) is checked by the caller.
func (p EscalationPolicy) Check() []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	if len(p.Severities) == 0 {
		add("severities", "is required: a list of critical and warning")
	}
	for i, s := range p.Severities {
		if s != "critical" && s != "warning" {
			add(fmt.Sprintf("severities[%d]", i), "must be critical or warning, got %q", s)
		}
	}
	if time.Duration(p.RepeatEvery) < MinPolicyDuration {
		add("repeat_every", "must be at least 1s, got %s", time.Duration(p.RepeatEvery))
	}
	if p.Loops < 1 || p.Loops > MaxPolicyLoops {
		add("loops", "must be 1 to %d, got %d", MaxPolicyLoops, p.Loops)
	}
	if len(p.Tiers) == 0 || len(p.Tiers) > MaxPolicyTiers {
		add("tiers", "must list 1 to %d tiers, got %d", MaxPolicyTiers, len(p.Tiers))
	}
	for i, t := range p.Tiers {
		if t.After != 0 && time.Duration(t.After) < MinPolicyDuration {
			add(fmt.Sprintf("tiers[%d].after", i), "must be 0s or at least 1s, got %s", time.Duration(t.After))
		}
		if i > 0 && t.After < p.Tiers[i-1].After {
			add(fmt.Sprintf("tiers[%d].after", i), "must not be before the previous tier's")
		}
		if t.Members != nil && len(t.Members) == 0 {
			add(fmt.Sprintf("tiers[%d].members", i), "must list members, or be left out for every member")
		}
		for j, m := range t.Members {
			if uuid.Validate(m) != nil {
				add(fmt.Sprintf("tiers[%d].members[%d]", i, j), "must be a member id, got %q", m)
			}
		}
	}
	return errs
}

// Escalates reports whether incidents of severity are escalated.
func (p EscalationPolicy) Escalates(severity string) bool {
	return slices.Contains(p.Severities, severity)
}

// FieldError names one invalid field of an input and says what is wrong.
type FieldError struct {
	Field  string
	Detail string
}
