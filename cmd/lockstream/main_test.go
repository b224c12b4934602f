package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHelpListsCommandsAndFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(out.String(), c.name) {
			t.Errorf("--help does not list %q:\n%s", c.name, out.String())
		}
	}

	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"all", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("all --help exited %d", code)
	}
	for _, s := range settingTable() {
		if strings.HasPrefix(s.flag, "sink-") || strings.HasPrefix(s.flag, "fake-swrve-") {
			continue
		}
		if !strings.Contains(errOut.String(), "-"+s.flag) || !strings.Contains(errOut.String(), s.env) {
			t.Errorf("all --help does not list --%s with %s", s.flag, s.env)
		}
	}
}

func TestUnknownCommandAndFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Errorf("unknown command: code %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"migrate", "--no-such-flag"}, &out, &errOut); code != 2 {
		t.Errorf("unknown flag: code %d, stderr %q", code, errOut.String())
	}
}

// A flag beats its environment variable, which beats the built-in default.
func TestSettingPrecedence(t *testing.T) {
	t.Setenv("LOCKSTREAM_HTTP_ADDR", "127.0.0.1:9999")
	v := newFlagSet("api", []string{"http-addr", "redis-url"})
	if err := v.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got := v.str("http-addr"); got != "127.0.0.1:9999" {
		t.Errorf("env: http-addr = %q", got)
	}
	if got := v.str("redis-url"); got != "redis://127.0.0.1:6379/0" {
		t.Errorf("default: redis-url = %q", got)
	}
	v = newFlagSet("api", []string{"http-addr"})
	if err := v.fs.Parse([]string{"--http-addr", "127.0.0.1:7777"}); err != nil {
		t.Fatal(err)
	}
	if got := v.str("http-addr"); got != "127.0.0.1:7777" {
		t.Errorf("flag: http-addr = %q", got)
	}
}

func TestTypedSettingsNameTheVariableOnError(t *testing.T) {
	t.Setenv("LOCKSTREAM_HEARTBEAT_TIMEOUT", "soon")
	t.Setenv("LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE", "maybe")
	v := newFlagSet("all", []string{"heartbeat-timeout", "webhook-allow-private"})
	if err := v.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := v.duration("heartbeat-timeout"); err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_HEARTBEAT_TIMEOUT") {
		t.Errorf("bad duration: err = %v", err)
	}
	if _, err := v.bool("webhook-allow-private"); err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE") {
		t.Errorf("bad bool: err = %v", err)
	}
}

func TestCounterTotalsByNameAndLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"outcome"})
	reg.MustRegister(c)
	c.WithLabelValues("sent").Add(3)
	c.WithLabelValues("failed").Add(2)
	totals, err := counterTotals(reg)
	if err != nil {
		t.Fatal(err)
	}
	if totals["x_total"] != 5 || totals[`x_total{outcome="sent"}`] != 3 {
		t.Errorf("totals = %v", totals)
	}
}

// TestMemberTokenIdleSetting: LOCKSTREAM_MEMBER_TOKEN_IDLE takes days or a Go
// duration, defaults to 60 days, and refuses zero and garbage naming itself.
func TestMemberTokenIdleSetting(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 60 * 24 * time.Hour, "30d": 30 * 24 * time.Hour, "36h": 36 * time.Hour} {
		if in != "" {
			t.Setenv("LOCKSTREAM_MEMBER_TOKEN_IDLE", in)
		}
		v := newFlagSet("api", []string{"member-token-idle"})
		if err := v.fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if got, err := memberTokenIdle(v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"0d", "0", "soon", "-3d", "1.5d"} {
		t.Setenv("LOCKSTREAM_MEMBER_TOKEN_IDLE", bad)
		v := newFlagSet("api", []string{"member-token-idle"})
		if err := v.fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if _, err := memberTokenIdle(v); err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_MEMBER_TOKEN_IDLE") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}
