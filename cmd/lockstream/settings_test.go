package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/internal/settings"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the settings tables of README.md and docs/DESIGN.md from the declarations")

// parseAllSettings returns `all`'s settings from the environment and args, as
// `lockstream all` would parse them.
func parseAllSettings(t testing.TB, args ...string) *allSettings {
	t.Helper()
	c := newAllSettings()
	parseSettings(t, c, args)
	return c
}

// parseNodeSettings returns the node settings of need from the environment.
func parseNodeSettings(t testing.TB, need storeSet) *nodeSettings {
	t.Helper()
	c := &nodeSettings{need: need}
	parseSettings(t, c, nil)
	return c
}

func parseSettings(t testing.TB, r settings.Registrar, args []string) {
	t.Helper()
	s := settings.New()
	s.Register(r)
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	if err := s.Apply(fs, os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
}

// commandRows returns a command's settings as `lockstream config` shows them.
func commandRows(t testing.TB, name string) []settings.Row {
	t.Helper()
	c := findCommand(commands(), name)
	if c == nil || c.setup == nil {
		t.Fatalf("no command %q with settings", name)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	s, _, _ := setupCommand(*c, fs)
	if err := s.Apply(fs, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s.Rows()
}

// settingsDocs are the generated tables of the docs: `all`'s, and the settings of
// every other command that `all` does not read.
func settingsDocs(t testing.TB) map[string][]settings.Row {
	t.Helper()
	all := commandRows(t, "all")
	seen := map[string]bool{}
	for _, r := range all {
		seen[r.Variable] = true
	}
	var others []settings.Row
	for _, c := range commands() {
		if c.setup == nil || c.name == "all" {
			continue
		}
		for _, r := range commandRows(t, c.name) {
			if !seen[r.Variable] {
				seen[r.Variable] = true
				others = append(others, r)
			}
		}
	}
	return map[string][]settings.Row{"all": all, "others": others}
}

// docsBlock finds the generated table named name in text: the lines between
// `<!-- settings:name … -->` and `<!-- /settings -->`.
func docsBlock(text, name string) (start, end int, ok bool) {
	open := "<!-- settings:" + name + " "
	i := strings.Index(text, open)
	if i < 0 {
		return 0, 0, false
	}
	i += strings.Index(text[i:], "-->\n") + len("-->\n")
	j := strings.Index(text[i:], "<!-- /settings -->")
	if j < 0 {
		return 0, 0, false
	}
	return i, i + j, true
}

// TestSettingsDocsMatch: the settings tables of README.md and docs/DESIGN.md are
// the declarations' (`lockstream config --markdown`), so a setting added, renamed
// or changed without its row fails here. `go test ./cmd/lockstream -run
// TestSettingsDocsMatch -update-docs` rewrites them.
func TestSettingsDocsMatch(t *testing.T) {
	docs := settingsDocs(t)
	for _, path := range []string{"../../README.md", "../../docs/DESIGN.md"} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		for _, name := range []string{"all", "others"} {
			start, end, ok := docsBlock(text, name)
			if !ok {
				t.Errorf("%s: no generated table <!-- settings:%s … --> … <!-- /settings -->", path, name)
				continue
			}
			var want bytes.Buffer
			if err := settings.WriteMarkdown(&want, docs[name]); err != nil {
				t.Fatal(err)
			}
			if text[start:end] == want.String() {
				continue
			}
			if *updateDocs {
				text = text[:start] + want.String() + text[end:]
				continue
			}
			t.Errorf("%s: the %s settings table differs from the declarations; run go test ./cmd/lockstream -run TestSettingsDocsMatch -update-docs\n--- %s\n%s--- declarations\n%s",
				path, name, path, text[start:end], want.String())
		}
		if *updateDocs && text != string(raw) {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The README's table is `lockstream config --json` for all: the same settings, in
// the same order, with the same flags, defaults and docs.
func TestReadmeTableIsConfigJSON(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	start, end, ok := docsBlock(string(raw), "all")
	if !ok {
		t.Fatal("README.md has no generated table of all's settings")
	}
	readme := settings.ParseMarkdown(string(raw)[start:end])

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"config", "all", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("config --json exited %d: %s", code, errOut.String())
	}
	var rows []settings.Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("config --json: %v\n%s", err, out.String())
	}
	if len(rows) != len(readme) {
		t.Errorf("config --json lists %d settings, the README %d", len(rows), len(readme))
	}
	for i := range min(len(rows), len(readme)) {
		got, want := readme[i], rows[i]
		if got.Variable != want.Variable || got.Flag != want.Flag || got.Default != want.Default || got.Doc != want.Doc {
			t.Errorf("row %d: README %+v, config --json %+v", i, got, want)
		}
	}
}

// Every command declares its settings consistently (a setting two boxes read is
// declared the same way by both), and a daemon command lists only the stores and
// brokers it uses.
func TestCommandsListTheirOwnSettings(t *testing.T) {
	for _, c := range commands() {
		if c.setup != nil {
			commandRows(t, c.name) // fails on a setting declared twice differently
		}
	}
	flags := func(name string) []string {
		var out []string
		for _, r := range commandRows(t, name) {
			out = append(out, r.Flag)
		}
		return out
	}
	for cmd, absent := range map[string][]string{
		"consume":    {"--clickhouse-url", "--secret-key", "--http-addr"},
		"retrier":    {"--kafka-brokers", "--kafka-partitions", "--heartbeat-timeout"},
		"escalation": {"--clickhouse-url", "--kafka-brokers", "--redis-url"},
		"maintain":   {"--kafka-brokers", "--redis-url"},
		"heartbeat":  {"--flap-changes", "--secret-key"},
		"history":    {"--pg-url", "--redis-url"},
		"all":        {"--metrics-addr", "--sink-addr"},
	} {
		got := flags(cmd)
		for _, f := range absent {
			if slices.Contains(got, f) {
				t.Errorf("%s lists %s, which it never reads", cmd, f)
			}
		}
	}
	if !slices.Contains(flags("retrier"), "--retry-workers") || !slices.Contains(flags("consume"), "--flap-window") {
		t.Error("retrier or consume lacks a setting of its own")
	}
}

// `lockstream config` shows each value's source, and secrets as <set>.
func TestConfigShowsSourcesAndHidesSecrets(t *testing.T) {
	t.Setenv("LOCKSTREAM_ADMIN_TOKEN", "very-secret")
	t.Setenv("LOCKSTREAM_HTTP_ADDR", "127.0.0.1:9999")
	t.Setenv("LOCKSTREAM_AMQP_URL", "amqp://guest:hunter2@127.0.0.1:5672/")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"config", "api", "--json", "--http-read-timeout", "45s"}, &out, &errOut); code != 0 {
		t.Fatalf("config exited %d: %s", code, errOut.String())
	}
	if strings.Contains(out.String(), "very-secret") || strings.Contains(out.String(), "hunter2") {
		t.Fatalf("config shows a secret:\n%s", out.String())
	}
	var rows []settings.Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	byVar := map[string]settings.Row{}
	for _, r := range rows {
		byVar[r.Variable] = r
	}
	for v, want := range map[string]settings.Row{
		"LOCKSTREAM_ADMIN_TOKEN":       {Value: "<set>", Source: settings.FromEnv},
		"LOCKSTREAM_HTTP_ADDR":         {Value: "127.0.0.1:9999", Source: settings.FromEnv},
		"LOCKSTREAM_HTTP_READ_TIMEOUT": {Value: "45s", Source: settings.FromFlag},
		"LOCKSTREAM_INGEST_TOKEN":      {Value: "", Source: settings.FromDefault},
		"LOCKSTREAM_SECRET_OVERLAP":    {Value: "24h", Source: settings.FromDefault},
	} {
		got := byVar[v]
		if got.Value != want.Value || got.Source != want.Source {
			t.Errorf("%s: value %q from %s, want %q from %s", v, got.Value, got.Source, want.Value, want.Source)
		}
	}
	if _, ok := byVar["LOCKSTREAM_FLAP_CHANGES"]; ok {
		t.Error("config api lists the consumer's LOCKSTREAM_FLAP_CHANGES")
	}

	out.Reset()
	if code := run(context.Background(), []string{"config"}, &out, &errOut); code != 0 {
		t.Fatalf("config exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"VARIABLE", "LOCKSTREAM_RETRY_WORKERS", "<set>", "LOCKSTREAM_STATS_INTERVAL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config (all, as text) lacks %q:\n%s", want, out.String())
		}
	}
}
