package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// ScratchStores is a private set of databases on the configured servers, for a
// benchmark that runs the whole pipeline without touching the deployment's data:
// a new Postgres database and ClickHouse database (created empty; migrations fill
// them) and a Redis key prefix of its own. Drop removes all three.
type ScratchStores struct {
	PostgresURL   string
	ClickHouseURL string
	RedisPrefix   string

	basePostgresURL string
	postgresName    string
	redisURL        string
}

// NewScratchStores creates an empty Postgres database next to the one pgURL
// names, and names a ClickHouse database next to chURL's and a Redis prefix
// under redisPrefix, all with the same random suffix.
func NewScratchStores(ctx context.Context, pgURL, chURL, redisURL, redisPrefix string) (*ScratchStores, error) {
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	name := "lockstream_scratch_" + hex.EncodeToString(suffix)
	pgU, err := url.Parse(pgURL)
	if err != nil {
		return nil, fmt.Errorf("scratch stores: parsing postgres URL: %w", err)
	}
	chU, err := url.Parse(chURL)
	if err != nil {
		return nil, fmt.Errorf("scratch stores: parsing clickhouse URL: %w", err)
	}
	conn, err := connectOne(ctx, pgURL)
	if err != nil {
		return nil, fmt.Errorf("scratch stores: connecting to postgres: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("scratch stores: creating database %s (the role needs CREATEDB): %w", name, err)
	}
	s := &ScratchStores{basePostgresURL: pgURL, postgresName: name, redisURL: redisURL,
		RedisPrefix: redisPrefix + strings.TrimPrefix(name, "lockstream_") + ":"}
	pgU.Path = "/" + name
	s.PostgresURL = pgU.String()
	chU.Path = "/" + name
	s.ClickHouseURL = chU.String()
	return s, nil
}

// Drop removes the scratch databases and every Redis key under the prefix.
func (s *ScratchStores) Drop(ctx context.Context) error {
	conn, err := connectOne(ctx, s.basePostgresURL)
	if err != nil {
		return fmt.Errorf("scratch stores: connecting to postgres: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.postgresName+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("scratch stores: dropping database %s: %w", s.postgresName, err)
	}
	opts, err := clickhouse.ParseDSN(s.ClickHouseURL)
	if err != nil {
		return fmt.Errorf("scratch stores: parsing clickhouse URL: %w", err)
	}
	ch, err := clickhouse.Open(opts)
	if err != nil {
		return fmt.Errorf("scratch stores: opening clickhouse: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Exec(ctx, "DROP DATABASE IF EXISTS "+s.postgresName); err != nil {
		return fmt.Errorf("scratch stores: dropping clickhouse database %s: %w", s.postgresName, err)
	}
	ropts, err := redis.ParseURL(s.redisURL)
	if err != nil {
		return fmt.Errorf("scratch stores: parsing redis URL: %w", err)
	}
	rc := redis.NewClient(ropts)
	defer func() { _ = rc.Close() }()
	iter := rc.Scan(ctx, 0, s.RedisPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rc.Del(ctx, iter.Val()).Err(); err != nil {
			return fmt.Errorf("scratch stores: deleting redis keys: %w", err)
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scratch stores: deleting redis keys: %w", err)
	}
	return nil
}

// connectOne opens a single connection to url, whose pool settings
// (pool_max_conns, ...) it ignores.
func connectOne(ctx context.Context, url string) (*pgx.Conn, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing postgres URL: %w", err)
	}
	return pgx.ConnectConfig(ctx, config.ConnConfig)
}

// PostgresCost is a reading of what Postgres has done so far, for a benchmark
// to take the difference of two readings: the cluster's WAL position and the
// backend processes serving this store's database.
type PostgresCost struct {
	// WALBytes is pg_current_wal_lsn() in bytes: the whole cluster's WAL,
	// other databases' writes included.
	WALBytes int64
	// BackendPIDs are the process ids of the client backends connected to
	// this store's database (pg_stat_activity), for their CPU time in /proc.
	BackendPIDs []int
}

// PostgresCost reads the WAL position and this database's backends.
func (p *Postgres) PostgresCost(ctx context.Context) (PostgresCost, error) {
	var c PostgresCost
	if err := p.pool.QueryRow(ctx, `
		SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint,
		       coalesce((SELECT array_agg(pid) FROM pg_stat_activity
		                 WHERE datname = current_database() AND backend_type = 'client backend'), '{}')`).
		Scan(&c.WALBytes, &c.BackendPIDs); err != nil {
		return PostgresCost{}, fmt.Errorf("reading the WAL position and backends: %w", err)
	}
	return c, nil
}
