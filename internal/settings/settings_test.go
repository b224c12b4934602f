package settings_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/internal/settings"
)

type box struct {
	Addr    string
	Timeout time.Duration
	Workers int
	Rate    float64
	Private bool
	Brokers []string
	Token   string
}

func (b *box) RegisterSettings(s *settings.Set) {
	s.String(&b.Addr, "127.0.0.1:8080", settings.Decl{Name: "http-addr", Doc: "listen address"})
	s.Duration(&b.Timeout, 2*time.Minute, settings.Decl{Name: "http-timeout", Doc: "timeout"})
	s.Int(&b.Workers, 256, settings.Decl{Name: "workers", Doc: "workers"})
	s.Float(&b.Rate, 300, settings.Decl{Name: "rate", Doc: "rate"})
	s.Bool(&b.Private, false, settings.Decl{Name: "allow-private", Doc: "private | loopback"})
	s.List(&b.Brokers, nil, settings.Decl{Name: "brokers", Doc: "brokers"})
	s.String(&b.Token, "", settings.Decl{Name: "token", Doc: "token", Secret: true})
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// A flag beats its variable, which beats the default; each row says which.
func TestPrecedenceAndSources(t *testing.T) {
	var b box
	s := settings.New()
	s.Register(&b)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	err := s.Apply(fs, env(map[string]string{"LOCKSTREAM_HTTP_ADDR": "0.0.0.0:1", "LOCKSTREAM_WORKERS": "8",
		"LOCKSTREAM_TOKEN": "s3cret", "LOCKSTREAM_BROKERS": " a:1, ,b:2 "}))
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--workers", "16", "--allow-private=yes"}); err != nil {
		t.Fatal(err)
	}
	if b.Addr != "0.0.0.0:1" || b.Workers != 16 || !b.Private || b.Timeout != 2*time.Minute || b.Token != "s3cret" ||
		strings.Join(b.Brokers, "|") != "a:1|b:2" {
		t.Fatalf("bound values: %+v", b)
	}
	want := map[string]settings.Row{
		"LOCKSTREAM_HTTP_ADDR":     {Value: "0.0.0.0:1", Default: "127.0.0.1:8080", Source: settings.FromEnv},
		"LOCKSTREAM_HTTP_TIMEOUT":  {Value: "2m", Default: "2m", Source: settings.FromDefault},
		"LOCKSTREAM_WORKERS":       {Value: "16", Default: "256", Source: settings.FromFlag},
		"LOCKSTREAM_TOKEN":         {Value: "<set>", Default: "", Source: settings.FromEnv},
		"LOCKSTREAM_ALLOW_PRIVATE": {Value: "true", Default: "false", Source: settings.FromFlag},
	}
	for _, r := range s.Rows() {
		if w, ok := want[r.Variable]; ok && (r.Value != w.Value || r.Default != w.Default || r.Source != w.Source) {
			t.Errorf("%s: %+v, want %+v", r.Variable, r, w)
		}
	}
}

// A variable that does not parse is named in the error.
func TestBadVariableIsNamed(t *testing.T) {
	var b box
	s := settings.New()
	s.Register(&b)
	err := s.Apply(flag.NewFlagSet("t", flag.ContinueOnError), env(map[string]string{"LOCKSTREAM_HTTP_TIMEOUT": "soon",
		"LOCKSTREAM_ALLOW_PRIVATE": "maybe"}))
	if err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_HTTP_TIMEOUT") || !strings.Contains(err.Error(), "LOCKSTREAM_ALLOW_PRIVATE") {
		t.Fatalf("err = %v", err)
	}
}

// Two boxes may read one setting when they declare it alike; declared
// differently, the command fails to start.
func TestSharedDeclarations(t *testing.T) {
	var a, b box
	s := settings.New()
	s.Register(&a, &b)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := s.Apply(fs, env(nil)); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--workers=3"}); err != nil {
		t.Fatal(err)
	}
	if a.Workers != 3 || b.Workers != 3 || len(s.Rows()) != 7 {
		t.Fatalf("shared setting: %d, %d, %d rows", a.Workers, b.Workers, len(s.Rows()))
	}

	var n int
	s = settings.New()
	s.Register(&a)
	s.Int(&n, 64, settings.Decl{Name: "workers", Doc: "workers"})
	if err := s.Apply(nil, env(nil)); err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_WORKERS") {
		t.Fatalf("differing declarations: err = %v", err)
	}
}

// The markdown table reads back as it was written, bars in docs included, and
// URL passwords are masked in values.
func TestMarkdownRoundTripAndRedaction(t *testing.T) {
	var b box
	var url string
	s := settings.New()
	s.Register(&b)
	s.String(&url, "", settings.Decl{Name: "amqp-url", Doc: "broker"})
	if err := s.Apply(nil, env(map[string]string{"LOCKSTREAM_AMQP_URL": "amqp://guest:pw@h:5672/"})); err != nil {
		t.Fatal(err)
	}
	rows := s.Rows()
	var md bytes.Buffer
	if err := settings.WriteMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	back := settings.ParseMarkdown(md.String())
	if len(back) != len(rows) {
		t.Fatalf("%d rows back of %d:\n%s", len(back), len(rows), md.String())
	}
	for i := range rows {
		if back[i].Variable != rows[i].Variable || back[i].Flag != rows[i].Flag || back[i].Default != rows[i].Default ||
			back[i].Doc != rows[i].Doc {
			t.Errorf("row %d: %+v back as %+v", i, rows[i], back[i])
		}
	}
	if r, _ := s.Lookup("amqp-url"); strings.Contains(r.Value, "pw") {
		t.Errorf("amqp-url shows its password: %q", r.Value)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0", time.Minute: "1m", 120 * time.Hour: "120h",
		90 * time.Second: "1m30s", 10 * time.Second: "10s", 1200 * time.Millisecond: "1.2s"} {
		if got := settings.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
