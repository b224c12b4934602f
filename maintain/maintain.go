// Package maintain keeps the stores bounded (docs/DESIGN.md "Stores"): it makes
// the month partitions of the Postgres tables that grow with traffic ahead of
// time, drops whole months older than the retention — keeping a month that
// still holds an open delivery, and saying so — deletes the notification
// idempotency keys older than the retention, and drops ClickHouse history
// months older than the history retention. With WithReports it also puts the
// clients' weekly reports into the outbox (docs/DESIGN.md "Analytics").
package maintain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/contain"
	"github.com/lockstream/lockstream/storage"
)

// Defaults of Config.
const (
	DefaultRetention = 90 * 24 * time.Hour
	DefaultInterval  = time.Hour
	DefaultAhead     = 3
	// DefaultReportInterval is how often due weekly reports are looked for.
	DefaultReportInterval = time.Minute
	// DefaultReportLateness is how late after Monday 08:00 a week's report
	// still goes out.
	DefaultReportLateness = 24 * time.Hour
)

// DefaultTables are the Postgres tables partitioned by month. deliveries holds
// the open deliveries that keep a month; inbox_messages is skipped where it does
// not exist.
var DefaultTables = []string{"notifications", "deliveries", "pushes", "delivery_attempts", "inbox_messages", "member_emails"}

// DefaultHistoryTables are the ClickHouse tables partitioned by toYYYYMM: the
// raw history and the analytics rollups its views fill (a month of rollups
// goes with its month of rows). The analytics levels' 30-day spans
// (partitioned by year, a row per sensor and span) and the levels' seals are
// kept: they are small, and a top list's prefix reads spans from the start.
var DefaultHistoryTables = []string{"readings", "events", "delivery_attempts",
	"readings_hourly", "events_hourly", "fleet_readings_hourly", "fleet_events_hourly",
	"history_touched", "rollup_seals", "events_level_hour", "events_level_day", "events_level_block"}

// Config configures the maintainer.
type Config struct {
	// Retention: a month partition whose month ended before now-Retention is
	// dropped, and a notification idempotency key recorded before it deleted
	// (a copy of its message arriving later is recorded again). Defaults to
	// DefaultRetention (90 days).
	Retention time.Duration
	// HistoryRetention is the same for ClickHouse history; 0 keeps it forever.
	// Defaults to 0.
	HistoryRetention time.Duration
	// Interval is how often the maintainer runs. Defaults to DefaultInterval (1h).
	Interval time.Duration
	// Ahead is how many months after the current one get their partitions
	// made. Defaults to DefaultAhead (3).
	Ahead int
	// Tables are the Postgres tables partitioned by month. Defaults to
	// DefaultTables.
	Tables []string
	// HistoryTables are the ClickHouse tables. Defaults to DefaultHistoryTables.
	HistoryTables []string
	// ReportInterval is how often the weekly reports due are looked for (one
	// query when none is). Defaults to DefaultReportInterval (1m).
	ReportInterval time.Duration
	// ReportLateness: a week's report not written by Monday 08:00 local plus
	// this (the maintainers were down) is skipped. Defaults to
	// DefaultReportLateness (24h).
	ReportLateness time.Duration
	// Now returns the current time; tests walk through months with it.
	// Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.Ahead = cmp.Or(c.Ahead, DefaultAhead)
	c.ReportInterval = cmp.Or(c.ReportInterval, DefaultReportInterval)
	c.ReportLateness = cmp.Or(c.ReportLateness, DefaultReportLateness)
	if c.Tables == nil {
		c.Tables = DefaultTables
	}
	if c.HistoryTables == nil {
		c.HistoryTables = DefaultHistoryTables
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports the fields out of range.
func (c Config) Validate() error {
	var errs []error
	if c.Retention < 0 || c.HistoryRetention < 0 {
		errs = append(errs, errors.New("maintain: Retention and HistoryRetention must not be negative"))
	}
	if c.Interval <= 0 || c.Ahead < 0 {
		errs = append(errs, errors.New("maintain: Interval must be positive and Ahead not negative"))
	}
	if c.ReportInterval <= 0 || c.ReportLateness <= 0 {
		errs = append(errs, errors.New("maintain: ReportInterval and ReportLateness must be positive"))
	}
	return errors.Join(errs...)
}

// ParseRetention reads a retention setting: a Go duration ("2160h") or a number
// of days ("90d"); "0" is zero.
func ParseRetention(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("retention %q: want a number of days (90d) or a duration (2160h)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("retention %q: want a number of days (90d) or a duration (2160h)", s)
	}
	return d, nil
}

// Store is the Postgres side (PostgresStore).
type Store interface {
	MonthPartitions(ctx context.Context, table string) ([]storage.MonthPartition, error)
	CreateMonthPartition(ctx context.Context, table string, month time.Time) (string, error)
	OpenDeliveries(ctx context.Context, partition storage.MonthPartition) (int64, error)
	DropMonthPartition(ctx context.Context, partition storage.MonthPartition) error
	DefaultPartitionRows(ctx context.Context, table string) (int64, error)
	DeleteNotificationKeys(ctx context.Context, before time.Time, limit int) (int64, error)
}

// History is the ClickHouse side (ClickHouseStore); nil leaves ClickHouse be.
type History interface {
	HistoryPartitions(ctx context.Context, tables []string) ([]HistoryPartition, error)
	DropHistoryPartition(ctx context.Context, hp HistoryPartition) error
}

// Report is what one pass did.
type Report struct {
	// Created, Dropped and Kept name partitions (Kept: old enough to drop, kept
	// for an open delivery in its month). HistoryDropped is "table/YYYYMM".
	Created, Dropped, Kept, HistoryDropped []string
	// KeysDeleted counts the notification idempotency keys deleted.
	KeysDeleted int64
	// RollupHoursSealed counts the hours whose analytics rollups were sealed,
	// RollupRowsCorrected the rollup rows corrected on the way because they
	// drifted from the raw history (a replayed batch).
	RollupHoursSealed, RollupRowsCorrected int
}

// Maintainer runs the passes. Create it with New.
type Maintainer struct {
	cfg     Config
	store   Store
	history History
	m       *maintainMetrics
	panics  *prometheus.CounterVec
	logger  *slog.Logger
	// reports is nil without WithReports.
	reports *reporter
	// rollups is nil without WithRollupRepair.
	rollups Rollups
}

// New returns a Maintainer; Run starts it.
func New(cfg Config, store Store, history History, reg prometheus.Registerer, logger *slog.Logger, opts ...Option) (*Maintainer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("maintain: the Store is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMaintainMetrics(reg)
	if err != nil {
		return nil, err
	}
	panics, err := contain.Counter(reg)
	if err != nil {
		return nil, err
	}
	mt := &Maintainer{cfg: cfg, store: store, history: history, m: m, panics: panics, logger: logger}
	for _, o := range opts {
		if err := o(mt); err != nil {
			return nil, err
		}
	}
	return mt, nil
}

// Run makes a pass at once and then every Interval until ctx is cancelled;
// a failed pass is logged and counted, and the next one tries again (one that
// panicked too: counted in lockstream_panics_total{where="maintain"}). With
// WithReports, weekly report rounds run beside the passes, every
// ReportInterval.
func (mt *Maintainer) Run(ctx context.Context) error {
	mt.logger.InfoContext(ctx, "maintainer started", "retention", mt.cfg.Retention,
		"history_retention", mt.cfg.HistoryRetention, "interval", mt.cfg.Interval, "tables", mt.cfg.Tables,
		"weekly_reports", mt.reports != nil)
	if mt.reports != nil {
		var reports sync.WaitGroup
		defer reports.Wait()
		reports.Go(func() { mt.runReports(ctx) })
	}
	ticker := time.NewTicker(mt.cfg.Interval)
	defer ticker.Stop()
	for {
		pass := func(ctx context.Context) error { _, err := mt.RunOnce(ctx); return err }
		if err := contain.Run(ctx, "maintain", mt.panics, pass); err != nil && ctx.Err() == nil {
			mt.m.errors.Inc()
			mt.logger.ErrorContext(ctx, "maintenance pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
