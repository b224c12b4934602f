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
	for _, r := range commandRows(t, "all") {
		if !strings.Contains(errOut.String(), r.Flag+"\n") || !strings.Contains(errOut.String(), r.Variable) {
			t.Errorf("all --help does not list %s with %s", r.Flag, r.Variable)
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
	c := parseAllSettings(t)
	if got := c.API.API.Addr; got != "127.0.0.1:9999" {
		t.Errorf("env: http-addr = %q", got)
	}
	if got := c.Node.RedisURL; got != "redis://127.0.0.1:6379/0" {
		t.Errorf("default: redis-url = %q", got)
	}
	c = parseAllSettings(t, "--http-addr", "127.0.0.1:7777")
	if got := c.API.API.Addr; got != "127.0.0.1:7777" {
		t.Errorf("flag: http-addr = %q", got)
	}
}

func TestTypedSettingsNameTheVariableOnError(t *testing.T) {
	t.Setenv("LOCKSTREAM_HEARTBEAT_TIMEOUT", "soon")
	t.Setenv("LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE", "maybe")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"all"}, &out, &errOut); code != 2 {
		t.Fatalf("bad settings: exit %d, want 2; stderr %s", code, errOut.String())
	}
	for _, env := range []string{"LOCKSTREAM_HEARTBEAT_TIMEOUT", "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE"} {
		if !strings.Contains(errOut.String(), env) {
			t.Errorf("the error does not name %s: %s", env, errOut.String())
		}
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
	if got := parseAllSettings(t).API.Inbox.MemberTokenIdle; got != 60*24*time.Hour {
		t.Errorf("default: %v, want 60 days", got)
	}
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "36h": 36 * time.Hour} {
		if got := parseAllSettings(t, "--member-token-idle", in).API.Inbox.MemberTokenIdle; got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
	for _, bad := range []string{"0d", "0", "soon", "-3d", "1.5d"} {
		t.Setenv("LOCKSTREAM_MEMBER_TOKEN_IDLE", bad)
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"all"}, &out, &errOut); code != 2 ||
			!strings.Contains(errOut.String(), "LOCKSTREAM_MEMBER_TOKEN_IDLE") {
			t.Errorf("%q: exit %d, stderr %s", bad, code, errOut.String())
		}
	}
}
