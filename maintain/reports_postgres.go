package maintain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage"
)

// ReportSubscriber is a client that asked for the weekly report and has an
// email address to get it at.
type ReportSubscriber struct {
	ClientID string
	Name     string
	Timezone string
	// LastWeek is the local Monday of the last week reported to it (in any
	// zone); zero when none was.
	LastWeek time.Time
}

// ReportSubscribers lists the clients with the weekly report on and an email
// address, with the last week each was sent: one query over the partial index
// of subscribers and the reports' primary key.
func (p *PostgresStore) ReportSubscribers(ctx context.Context) ([]ReportSubscriber, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT c.id::text, c.name, c.report_timezone,
		       (SELECT max(r.week) FROM client_reports r WHERE r.client_id = c.id)
		FROM clients c
		WHERE c.report_weekly AND c.email IS NOT NULL
		ORDER BY c.id`)
	if err != nil {
		return nil, fmt.Errorf("listing report subscribers: %w", err)
	}
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReportSubscriber, error) {
		var s ReportSubscriber
		var last *time.Time
		if err := row.Scan(&s.ClientID, &s.Name, &s.Timezone, &last); err != nil {
			return s, err
		}
		if last != nil {
			s.LastWeek = *last
		}
		return s, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing report subscribers: %w", err)
	}
	return subs, nil
}

// WeeklyReport is one week's report of a client, rendered, on its way to the
// outbox.
type WeeklyReport struct {
	ClientID string
	// Week is the local Monday the reported week starts on (its date only
	// counts).
	Week     time.Time
	Timezone string
	// DueAt is Monday 08:00 local after the week: the delivery's event time.
	DueAt               time.Time
	Subject, Text, HTML string
}

// EnqueueWeeklyReport writes the report and its email delivery (PENDING, due
// at now) in one statement, unless the client's week was written already —
// by this process or another, before a restart or not: then it writes
// nothing and returns "". It returns the delivery's id. The report goes to
// the client's address as it is when the retrier sends it.
func (p *PostgresStore) EnqueueWeeklyReport(ctx context.Context, r WeeklyReport, now time.Time) (string, error) {
	if uuid.Validate(r.ClientID) != nil {
		return "", fmt.Errorf("enqueueing the weekly report of client %s: %w", r.ClientID, storage.ErrNotFound)
	}
	week := r.Week.Format(time.DateOnly)
	var id string
	err := p.pool.QueryRow(ctx, `
		WITH report AS (
			INSERT INTO client_reports (client_id, week, timezone, delivery_id, due_at, subject, text_body, html_body)
			SELECT c.id, $2::date, $3, lockstream_uuid_v7(), $4, $5, $6, $7 FROM clients c WHERE c.id = $1
			ON CONFLICT (client_id, week) DO NOTHING
			RETURNING client_id, delivery_id, due_at
		)
		INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
		SELECT delivery_id, client_id, NULL, 'weekly_report', 'email', 'report:' || $2, 'PENDING', $8, due_at FROM report
		RETURNING id::text`,
		r.ClientID, week, r.Timezone, r.DueAt, r.Subject, r.Text, r.HTML, now).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("enqueueing the weekly report of client %s for %s: %w", r.ClientID, week, storage.MapError(err))
	}
	return id, nil
}
