package storage

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/internal/pgutil"
	"github.com/lockstream/lockstream/registry/secretbox"
)

// Postgres is the shared Postgres handle: the pool and the key of client
// secrets that the boxes' stores are built on (registry.New, inbox, …), and
// the outbox's statements not yet moved to their box. It is safe for
// concurrent use.
type Postgres struct {
	pool *pgxpool.Pool
	// secrets opens client signing secrets for delivery targets and is the
	// registry's to seal them with; see WithSecretBox.
	secrets *secretbox.Box
	// counter counts the statements sent; see WithStatementCounter.
	counter *StatementCounter
}

// StatementCounter counts the statements a Postgres store sends to the server
// (queries, executions and transaction control alike), for tests and
// benchmarks that check a cost in statements. It is safe for concurrent use.
type StatementCounter struct {
	n atomic.Int64
	// Batches, when set, counts each statement of a pipelined batch and each
	// COPY too (pgx traces those apart from single queries); unset, a batch
	// counts nothing, as the statement budgets of escalation and incident
	// tests were measured.
	Batches bool
}

// Count returns the number of statements sent so far.
func (c *StatementCounter) Count() int64 { return c.n.Load() }

// TraceQueryStart implements pgx's QueryTracer.
func (c *StatementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx's QueryTracer.
func (c *StatementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// PostgresOption configures OpenPostgres.
type PostgresOption func(*Postgres)

// WithSecretBox gives the store the key of client signing secrets: the outbox's
// delivery targets open them with it, and the registry (registry.New) seals
// them with it when it stores one. Without it, creating a client, rotating its
// secret and reading delivery targets fail.
func WithSecretBox(box *secretbox.Box) PostgresOption {
	return func(p *Postgres) { p.secrets = box }
}

// SecretBox returns the box given by WithSecretBox, nil without one.
func (p *Postgres) SecretBox() *secretbox.Box { return p.secrets }

// TraceBatchStart implements pgx's BatchTracer.
func (c *StatementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx's BatchTracer: one statement of a batch,
// counted when Batches is set.
func (c *StatementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	if c.Batches {
		c.n.Add(1)
	}
}

// TraceBatchEnd implements pgx's BatchTracer.
func (c *StatementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart implements pgx's CopyFromTracer: a COPY, counted when
// Batches is set.
func (c *StatementCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	if c.Batches {
		c.n.Add(1)
	}
	return ctx
}

// TraceCopyFromEnd implements pgx's CopyFromTracer.
func (c *StatementCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// WithStatementCounter makes the store count every statement it sends in c.
func WithStatementCounter(c *StatementCounter) PostgresOption {
	return func(p *Postgres) { p.counter = c }
}

// DefaultPostgresPoolSize is the most connections a process's pool opens when
// the URL does not say (`pool_max_conns=`). pgx's own default, the number of
// CPUs but at least 4, starved `lockstream all`: its state consumer and
// fan-out work one partition per worker (12 each), besides the retrier's
// claims, targets and outcome writes, and all queued for 4 connections. The
// pool opens connections as they are needed, so a process that needs fewer
// opens fewer.
const DefaultPostgresPoolSize = 24

// OpenPostgres connects a pool to url and checks that the server answers.
func OpenPostgres(ctx context.Context, url string, opts ...PostgresOption) (*Postgres, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing postgres URL: %w", err)
	}
	p := &Postgres{}
	for _, opt := range opts {
		opt(p)
	}
	if p.counter != nil {
		config.ConnConfig.Tracer = p.counter
	}
	if !strings.Contains(url, "pool_max_conns") {
		config.MaxConns = DefaultPostgresPoolSize
	}
	// lockstream's statements are short and batched: JIT compilation, which
	// the planner starts on a high cost estimate (a batch over a month
	// partition not analyzed yet), cost more than a second per outcome write
	// for milliseconds of work. The URL may still turn it on (options=-c jit=on).
	if _, set := config.ConnConfig.RuntimeParams["jit"]; !set {
		config.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("opening postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to postgres at %s:%d: %w", config.ConnConfig.Host, config.ConnConfig.Port, err)
	}
	p.pool = pool
	return p, nil
}

// Ping checks that Postgres answers.
func (p *Postgres) Ping(ctx context.Context) error {
	return p.pool.Ping(ctx)
}

// Close waits for queries in progress and closes every connection.
func (p *Postgres) Close() {
	p.pool.Close()
}

// Pool returns the connection pool, for the boxes that own their statements
// (registry, inbox, fanout, …): plumbing is shared, statements are not.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// MapError turns pgx's errors into the domain's sentinels (no rows →
// ErrNotFound, a unique violation → ErrConflict, a foreign key violation →
// ErrNotFound), keeping the cause.
func MapError(err error) error { return pgutil.MapError(err) }
