package storage

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// ReportEmail is what a weekly report's email delivery sends.
type ReportEmail struct {
	DeliveryID          string
	Subject, Text, HTML string
}

// ReportEmails reads the weekly reports the deliveries carry, by delivery id;
// a delivery whose report is gone (its client was deleted) is missing.
func (p *Postgres) ReportEmails(ctx context.Context, deliveryIDs []string) (map[string]ReportEmail, error) {
	ids := make([]string, 0, len(deliveryIDs))
	for _, id := range deliveryIDs {
		if uuid.Validate(id) == nil {
			ids = append(ids, id)
		}
	}
	out := make(map[string]ReportEmail, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, `
		SELECT delivery_id::text, subject, text_body, html_body FROM client_reports WHERE delivery_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("reading report emails: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e ReportEmail
		if err := rows.Scan(&e.DeliveryID, &e.Subject, &e.Text, &e.HTML); err != nil {
			return nil, fmt.Errorf("reading report emails: %w", err)
		}
		out[e.DeliveryID] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading report emails: %w", err)
	}
	return out, nil
}
