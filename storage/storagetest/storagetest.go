// Package storagetest gives each test its own migrated Postgres database, its own
// ClickHouse database and its own Redis key prefix, all on real servers, and removes
// them when the test ends, so tests run in parallel and leave nothing behind.
//
// Each service is found in this order: an explicit LOCKSTREAM_TEST_PG_URL,
// LOCKSTREAM_TEST_REDIS_URL or LOCKSTREAM_TEST_CLICKHOUSE_URL; else the local default
// address; else a testcontainers-go container when a Docker engine is present; else
// the test fails with a message naming `make services`.
package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/registry/secretbox"
	"github.com/lockstream/lockstream/storage"
)

// Defaults are the addresses `make services` starts the services on.
const (
	DefaultPostgresURL   = "postgres://lockstream:lockstream@127.0.0.1:5432/lockstream?sslmode=disable"
	DefaultRedisURL      = "redis://127.0.0.1:6379/0"
	DefaultClickHouseURL = "clickhouse://127.0.0.1:9000/default"
)

const howToStart = "start the local services with `make services` (as root: installs and starts PostgreSQL, Redis and ClickHouse), " +
	"or point LOCKSTREAM_TEST_PG_URL / LOCKSTREAM_TEST_REDIS_URL / LOCKSTREAM_TEST_CLICKHOUSE_URL at running ones"

// Stores is one test's private set of stores: a migrated Postgres database, a
// migrated ClickHouse database and a Redis key prefix.
type Stores struct {
	PostgresURL   string
	ClickHouseURL string
	RedisURL      string
	RedisPrefix   string

	// Postgres encrypts client signing secrets with SecretBox, under a random key
	// of the test's own.
	Postgres   *storage.Postgres
	ClickHouse *storage.ClickHouse
	Redis      *storage.Redis
	SecretBox  *secretbox.Box
	// Registry is the registry's statements on Postgres.
	Registry *registry.Store
}

// New creates and migrates a fresh set of stores for t and removes them when t ends.
func New(t testing.TB) *Stores {
	t.Helper()
	return NewOn(t, Servers{})
}

// Servers names the servers a test's stores go on; an empty field means the
// shared one (found as New finds it). The chaos soak puts its stores on
// private servers (internal/servicetest), which it restarts.
type Servers struct {
	// PostgresURL is a URL of a role that may create databases; the test's
	// database is created beside the one it names.
	PostgresURL string
	RedisURL    string
}

// NewOn is New with the Postgres database and Redis prefix on the servers
// given.
func NewOn(t testing.TB, servers Servers) *Stores {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pgBase := servers.PostgresURL
	if pgBase == "" {
		pgBase = serviceURL(t, "postgres", "LOCKSTREAM_TEST_PG_URL", DefaultPostgresURL, pingPostgres, startPostgresContainer)
	}
	redisURL := servers.RedisURL
	if redisURL == "" {
		redisURL = RedisURL(t)
	}
	s := &Stores{
		PostgresURL:   newPostgresDatabase(t, pgBase),
		ClickHouseURL: NewClickHouseDatabase(t),
		RedisURL:      redisURL,
		RedisPrefix:   newRedisPrefix(t, redisURL),
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := migrations.Migrate(ctx, s.PostgresURL, s.ClickHouseURL, logger); err != nil {
		t.Fatalf("migrating test stores: %v", err)
	}

	key, err := secretbox.ParseKey(secretbox.NewKey())
	if err != nil {
		t.Fatalf("test secret key: %v", err)
	}
	if s.SecretBox, err = secretbox.New(key); err != nil {
		t.Fatalf("test secret key: %v", err)
	}
	if s.Postgres, err = storage.OpenPostgres(ctx, s.PostgresURL, storage.WithSecretBox(s.SecretBox)); err != nil {
		t.Fatalf("opening test postgres: %v", err)
	}
	t.Cleanup(s.Postgres.Close)
	s.Registry = registry.New(s.Postgres)
	if s.ClickHouse, err = storage.OpenClickHouse(ctx, s.ClickHouseURL); err != nil {
		t.Fatalf("opening test clickhouse: %v", err)
	}
	t.Cleanup(func() { _ = s.ClickHouse.Close() })
	if s.Redis, err = storage.OpenRedis(ctx, s.RedisURL, s.RedisPrefix); err != nil {
		t.Fatalf("opening test redis: %v", err)
	}
	t.Cleanup(func() { _ = s.Redis.Close() })
	return s
}

// uniqueName returns a name for a test's own database or key prefix.
func uniqueName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "lst_" + hex.EncodeToString(b)
}

// NewPostgresDatabase creates an empty database for t, dropped when t ends, and
// returns its URL.
func NewPostgresDatabase(t testing.TB) string {
	t.Helper()
	return newPostgresDatabase(t, serviceURL(t, "postgres", "LOCKSTREAM_TEST_PG_URL", DefaultPostgresURL, pingPostgres, startPostgresContainer))
}

// newPostgresDatabase creates an empty database for t on the server of base.
func newPostgresDatabase(t testing.TB, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to postgres: %v", err)
	}
	defer admin.Close(ctx)
	name := uniqueName()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating test database (the role needs CREATEDB; `make services` grants it): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})

	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parsing postgres URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewClickHouseDatabase names a ClickHouse database for t (migrations create it),
// dropped when t ends, and returns its URL.
func NewClickHouseDatabase(t testing.TB) string {
	t.Helper()
	base := serviceURL(t, "clickhouse", "LOCKSTREAM_TEST_CLICKHOUSE_URL", DefaultClickHouseURL, pingClickHouse, startClickHouseContainer)
	opts, err := clickhouse.ParseDSN(base)
	if err != nil {
		t.Fatalf("parsing clickhouse URL: %v", err)
	}
	name := uniqueName()
	t.Cleanup(func() {
		// A database a long test filled (the 10-minute chaos soak's) can take
		// ClickHouse over 30 s to drop on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		conn, err := clickhouse.Open(opts)
		if err != nil {
			t.Errorf("dropping clickhouse database %s: %v", name, err)
			return
		}
		defer conn.Close()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("dropping clickhouse database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parsing clickhouse URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// RedisURL returns the URL of a Redis server for tests.
func RedisURL(t testing.TB) string {
	t.Helper()
	return serviceURL(t, "redis", "LOCKSTREAM_TEST_REDIS_URL", DefaultRedisURL, pingRedis, startRedisContainer)
}

// NewRedisPrefix returns a key prefix of t's own; every key under it is deleted when
// t ends.
func NewRedisPrefix(t testing.TB) string {
	t.Helper()
	return newRedisPrefix(t, RedisURL(t))
}

// newRedisPrefix returns a key prefix of t's own on the server at redisURL.
func newRedisPrefix(t testing.TB, redisURL string) string {
	t.Helper()
	prefix := uniqueName() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Errorf("cleaning redis: %v", err)
			return
		}
		client := redis.NewClient(opts)
		defer client.Close()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleaning redis keys %s*: %v", prefix, err)
		}
	})
	return prefix
}

// services remembers, for the whole test binary, where each service was found, so the
// probe (and any container start) happens once per process rather than per test.
var services = struct {
	sync.Mutex
	urls map[string]string
	errs map[string]error
}{urls: map[string]string{}, errs: map[string]error{}}

func serviceURL(t testing.TB, name, envVar, defaultURL string,
	ping func(context.Context, string) error, start func(context.Context) (string, error)) string {
	t.Helper()
	services.Lock()
	defer services.Unlock()
	if u, ok := services.urls[name]; ok {
		return u
	}
	if err, ok := services.errs[name]; ok {
		t.Fatal(err)
	}
	u, err := findService(name, envVar, defaultURL, ping, start)
	if err != nil {
		services.errs[name] = err
		t.Fatal(err)
	}
	services.urls[name] = u
	return u
}

func findService(name, envVar, defaultURL string,
	ping func(context.Context, string) error, start func(context.Context) (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if u := os.Getenv(envVar); u != "" {
		if err := ping(ctx, u); err != nil {
			return "", fmt.Errorf("%s at %s=%s does not answer: %w", name, envVar, u, err)
		}
		return u, nil
	}
	localErr := ping(ctx, defaultURL)
	if localErr == nil {
		return defaultURL, nil
	}
	if dockerAvailable() {
		u, err := start(ctx)
		if err != nil {
			return "", fmt.Errorf("%s: no local server (%v) and starting a container failed: %w", name, localErr, err)
		}
		return u, nil
	}
	return "", fmt.Errorf("%s does not answer at %s (%v) and there is no Docker engine for testcontainers: %s",
		name, redactURL(defaultURL), localErr, howToStart)
}

func redactURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return u
	}
	return parsed.Redacted()
}

func pingPostgres(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func pingRedis(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	opts, err := redis.ParseURL(u)
	if err != nil {
		return err
	}
	client := redis.NewClient(opts)
	defer client.Close()
	return client.Ping(ctx).Err()
}

func pingClickHouse(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	opts, err := clickhouse.ParseDSN(u)
	if err != nil {
		return err
	}
	opts.DialTimeout = 3 * time.Second
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Ping(ctx)
}

// dockerAvailable reports whether a Docker engine answers on its usual socket (or
// DOCKER_HOST), the condition for falling back to testcontainers.
func dockerAvailable() bool {
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		return !strings.HasPrefix(host, "unix://") || fileExists(strings.TrimPrefix(host, "unix://"))
	}
	return fileExists("/var/run/docker.sock")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
