package maintain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/internal/contain"
)

// reportHour is the local hour of Monday at which a week's report is due.
const reportHour = 8

// ReportStore keeps the weekly reports' subscribers and puts each week's
// report into the outbox once (PostgresStore).
type ReportStore interface {
	ReportSubscribers(ctx context.Context) ([]ReportSubscriber, error)
	EnqueueWeeklyReport(ctx context.Context, r WeeklyReport, now time.Time) (string, error)
}

// ReportSource computes a client's report (analytics.Store: the figures of
// GET /v1/clients/{id}/report).
type ReportSource interface {
	Report(ctx context.Context, q analytics.ReportQuery) (analytics.Report, error)
}

// Option configures a Maintainer.
type Option func(*Maintainer) error

// WithReports makes the maintainer mail the weekly reports: every
// ReportInterval it looks for the clients whose Monday 08:00 has come in
// their zone, computes each one's report of the week before from source, and
// hands it to store, which writes it and its email delivery once per client
// and week.
func WithReports(store ReportStore, source ReportSource) Option {
	return func(mt *Maintainer) error {
		if store == nil || source == nil {
			return errors.New("maintain: WithReports needs a store and a source")
		}
		templates, err := analytics.NewMailTemplates()
		if err != nil {
			return err
		}
		mt.reports = &reporter{store: store, source: source, templates: templates}
		return nil
	}
}

// reporter is the weekly reports' part of a Maintainer.
type reporter struct {
	store     ReportStore
	source    ReportSource
	templates *analytics.MailTemplates
}

// ReportWeek is the week whose report a client in loc gets at now: the week
// (Monday 00:00 to Monday 00:00 local) before the one now is in, due on the
// Monday 08:00 local that follows it. due is false before then, and once
// lateness has passed since (a maintainer down all that time skips the
// week rather than mail it days late).
func ReportWeek(now time.Time, loc *time.Location, lateness time.Duration) (from, to, at time.Time, due bool) {
	from, to = analytics.LastWeek(now, loc)
	y, m, d := to.Date()
	at = time.Date(y, m, d, reportHour, 0, 0, 0, loc)
	return from, to, at, !now.Before(at) && now.Before(at.Add(lateness))
}

// RunReports puts into the outbox the weekly report of every subscriber
// whose report is due and not written yet, and returns how many it wrote. A
// report another maintainer wrote meanwhile is not written twice (the store's
// key). It goes on past a failing client and returns every error joined.
func (mt *Maintainer) RunReports(ctx context.Context) (int, error) {
	if mt.reports == nil {
		return 0, nil
	}
	now := mt.cfg.Now()
	subs, err := mt.reports.store.ReportSubscribers(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	written := 0
	for _, sub := range subs {
		ok, err := mt.reportOne(ctx, sub, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			written++
		}
	}
	return written, errors.Join(errs...)
}

// reportOne writes sub's report if it is due and not written yet.
func (mt *Maintainer) reportOne(ctx context.Context, sub ReportSubscriber, now time.Time) (bool, error) {
	loc, err := time.LoadLocation(sub.Timezone)
	if err != nil {
		return false, fmt.Errorf("weekly report of client %s: time zone %q: %w", sub.ClientID, sub.Timezone, err)
	}
	from, to, at, due := ReportWeek(now, loc, mt.cfg.ReportLateness)
	week := from.Format(time.DateOnly)
	// The store's key decides; this only spares computing a report that was
	// written (the dates compare as strings, both YYYY-MM-DD).
	if !due || (!sub.LastWeek.IsZero() && sub.LastWeek.Format(time.DateOnly) >= week) {
		return false, nil
	}
	rep, err := mt.reports.source.Report(ctx, analytics.ReportQuery{ClientID: sub.ClientID, From: from, To: to, Location: loc})
	if err != nil {
		return false, fmt.Errorf("weekly report of client %s for %s: %w", sub.ClientID, week, err)
	}
	mail, err := mt.reports.templates.Render(rep, sub.Name)
	if err != nil {
		return false, fmt.Errorf("weekly report of client %s for %s: %w", sub.ClientID, week, err)
	}
	id, err := mt.reports.store.EnqueueWeeklyReport(ctx, WeeklyReport{ClientID: sub.ClientID, Week: from,
		Timezone: loc.String(), DueAt: at, Subject: mail.Subject, Text: mail.Text, HTML: mail.HTML}, now)
	if err != nil || id == "" {
		return false, err
	}
	mt.m.reports.Inc()
	mt.logger.InfoContext(ctx, "weekly report enqueued", "client_id", sub.ClientID, "week", week,
		"timezone", loc.String(), "delivery_id", id)
	return true, nil
}

// runReports calls RunReports every ReportInterval until ctx is cancelled; a
// failed round is logged and counted, and the next one tries again.
func (mt *Maintainer) runReports(ctx context.Context) {
	ticker := time.NewTicker(mt.cfg.ReportInterval)
	defer ticker.Stop()
	for {
		round := func(ctx context.Context) error { _, err := mt.RunReports(ctx); return err }
		if err := contain.Run(ctx, "maintain", mt.panics, round); err != nil && ctx.Err() == nil {
			mt.m.reportErrors.Inc()
			mt.logger.ErrorContext(ctx, "weekly reports round failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
