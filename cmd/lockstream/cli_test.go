package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// Flags may stand before, between or after arguments; "--" ends them.
func TestFlagsMayFollowArguments(t *testing.T) {
	for _, c := range []struct {
		args     []string
		sensors  int
		readings int
		rest     string
	}{
		{[]string{"ingest", "--sensors", "1000", "--readings", "100000"}, 1000, 100000, "[ingest]"},
		{[]string{"--sensors=7", "ingest", "--readings", "9"}, 7, 9, "[ingest]"},
		{[]string{"ingest", "extra", "-sensors", "3"}, 3, 0, "[ingest extra]"},
		{[]string{"ingest", "--", "--sensors", "3"}, 0, 0, "[ingest --sensors 3]"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		sensors := fs.Int("sensors", 0, "")
		readings := fs.Int("readings", 0, "")
		rest, err := parseInterspersed(fs, c.args)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if *sensors != c.sensors || *readings != c.readings || fmt.Sprint(rest) != c.rest {
			t.Errorf("%q: sensors %d, readings %d, arguments %v; want %d, %d, %s", c.args, *sensors, *readings, rest,
				c.sensors, c.readings, c.rest)
		}
	}
}

// --help works after a command's arguments, and prints each default once.
func TestHelpAfterArgumentsPrintsEachDefaultOnce(t *testing.T) {
	t.Setenv("LOCKSTREAM_ADMIN_TOKEN", "a-token-that-must-not-show")
	for _, args := range [][]string{{"bench", "ingest", "--help"}, {"bench", "pipeline", "--help"}, {"all", "--help"}, {"api", "-h"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, errOut.String())
		}
		help := errOut.String()
		if strings.Contains(help, "a-token-that-must-not-show") {
			t.Fatalf("%q shows the admin token from the environment:\n%s", args, help)
		}
		// A flag's help is its line and the indented line after it.
		for _, block := range strings.Split(help, "\n  --")[1:] {
			if n := strings.Count(block, "default"); n > 1 {
				t.Errorf("%q prints a default %d times:\n  --%s", args, n, block)
			}
		}
		if args[0] == "bench" {
			for _, want := range []string{"--sensors", "default 100000", "--readings", "default 1000000", "--keep-stores"} {
				if !strings.Contains(help, want) {
					t.Errorf("%q does not show %q:\n%s", args, want, help)
				}
			}
		}
		// bench ingest runs the consumer and the history writer: the bridges',
		// the retrier's and the API's settings are not its own.
		if args[0] == "bench" && args[1] == "ingest" {
			for _, foreign := range []string{"--amqp-url", "--retry-workers", "--http-addr", "--flap-window", "--linked"} {
				if strings.Contains(help, foreign+"\n") {
					t.Errorf("bench ingest --help lists %s, which it never reads:\n%s", foreign, help)
				}
			}
		}
		if args[0] == "all" && !strings.Contains(help, `default "./data"`) {
			t.Errorf("all --help does not show the data folder's default:\n%s", help)
		}
	}
	var groupOut, groupErr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--help"}, &groupOut, &groupErr); code != 0 ||
		!strings.Contains(groupErr.String(), "<benchmark>") || !strings.Contains(groupErr.String(), "  ingest ") ||
		!strings.Contains(groupErr.String(), "  pipeline ") {
		t.Errorf("bench --help: code %d, want 0 and the benchmarks listed:\n%s", code, groupErr.String())
	}
	groupErr.Reset()
	if code := run(context.Background(), []string{"bench", "ingst"}, &groupOut, &groupErr); code != 2 ||
		!strings.Contains(groupErr.String(), `unknown benchmark "ingst"`) {
		t.Errorf("bench ingst: code %d, want 2 naming the unknown benchmark:\n%s", code, groupErr.String())
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "now"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), `unexpected argument "now"`) {
		t.Errorf("an argument to a command that takes none: code %d, %s", code, errOut.String())
	}
}

// `lockstream bench ingest` runs on a fresh machine: with no brokers configured
// on an embedded broker of its own, on a brand new Postgres database nobody
// migrated and a ClickHouse database that does not exist yet (it runs on private
// stores next to them, as bench pipeline does), flags after the benchmark's name;
// the configured database is left as it was.
func TestBenchIngestRunsOnItsOwnBroker(t *testing.T) {
	pgURL := storagetest.NewPostgresDatabase(t)
	t.Setenv("LOCKSTREAM_PG_URL", pgURL)
	t.Setenv("LOCKSTREAM_CLICKHOUSE_URL", storagetest.NewClickHouseDatabase(t))
	t.Setenv("LOCKSTREAM_REDIS_URL", storagetest.RedisURL(t))
	t.Setenv("LOCKSTREAM_REDIS_PREFIX", storagetest.NewRedisPrefix(t))
	t.Setenv("LOCKSTREAM_KAFKA_BROKERS", "")
	t.Setenv("LOCKSTREAM_KAFKA_PARTITIONS", "2")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"bench", "ingest", "--sensors", "50", "--readings", "2000"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("bench ingest exited %d:\n%s", code, errOut.String())
	}
	var res struct {
		Readings int `json:"readings"`
		Sensors  int `json:"sensors"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench output %q: %v", out.String(), err)
	}
	if res.Readings != 2000 || res.Sensors != 50 {
		t.Fatalf("bench measured %+v, want the flags' 2000 readings of 50 sensors:\n%s", res, out.String())
	}
	if !strings.Contains(errOut.String(), "embedded broker of its own") {
		t.Fatalf("no word of the embedded broker:\n%s", errOut.String())
	}
	if tables := publicTables(t, pgURL); len(tables) != 0 {
		t.Fatalf("the configured database now has tables %v; the benchmark should leave it alone", tables)
	}
}

// publicTables lists the tables of the public schema of the database at pgURL.
func publicTables(t *testing.T, pgURL string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatalf("connecting to %s: %v", pgURL, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
	if err != nil {
		t.Fatalf("listing tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("listing tables: %v", err)
	}
	return tables
}
