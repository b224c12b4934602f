package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/smtp"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/webhook"
)

func TestSinkVerifiesSignatures(t *testing.T) {
	secret := webhook.NewSecret()
	var out bytes.Buffer
	h := sinkHandler(secret, &out)
	body := []byte(`{"id":"e1","type":"state_changed","sensor":{"id":"xa7v9Dfadr7H","address":"1 Main St"},"data":1,"previous":0,"at":"2026-11-22T10:00:00Z","attempt":1}`)

	post := func(signWith string) int {
		now := time.Now()
		sig, err := webhook.Sign(signWith, "e1", now, body)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header.Set(webhook.HeaderID, "e1")
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(webhook.HeaderSignature, sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := post(secret); code != http.StatusNoContent {
		t.Fatalf("signed webhook: status %d", code)
	}
	if !strings.Contains(out.String(), "xa7v9Dfadr7H") || !strings.Contains(out.String(), "locked") {
		t.Errorf("sink printed %q", out.String())
	}
	if code := post(webhook.NewSecret()); code != http.StatusUnauthorized {
		t.Fatalf("webhook signed with another secret: status %d", code)
	}
	if !strings.Contains(out.String(), "REJECTED") {
		t.Errorf("sink did not report the rejection: %q", out.String())
	}
}

func TestFakeSwrveCommandServesPushes(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("LOCKSTREAM_FAKE_SWRVE_ADDR", addr)
	t.Setenv("LOCKSTREAM_FAKE_SWRVE_SCALE", "0.001")
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"fake-swrve"}, io.Discard, io.Discard) }()
	var body string
	waitUntil(t, "the fake Swrve answers a push", func() bool {
		resp, err := http.PostForm("http://"+addr+"/push", url.Values{"push_key": {"k"}, "user": {"u"}, "message": {"hi"}})
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(body, `"code":200`) {
		t.Errorf("fake Swrve answered %s", body)
	}
	cancel()
	if code := <-exited; code != 0 {
		t.Errorf("fake-swrve exited %d", code)
	}
}

// TestSinkPrintsMail sends one message to the webhook sink's SMTP address and
// waits for its line: recipient and decoded subject.
func TestSinkPrintsMail(t *testing.T) {
	smtpAddr := freeAddr(t)
	t.Setenv("LOCKSTREAM_SINK_ADDR", freeAddr(t))
	t.Setenv("LOCKSTREAM_SINK_SECRET", webhook.NewSecret())
	t.Setenv("LOCKSTREAM_SINK_SMTP_ADDR", smtpAddr)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"webhook-sink"}, &out, io.Discard) }()
	msg := "To: resident@demo.example\r\nSubject: =?utf-8?q?3_unseen_=E2=80=94_sim1?=\r\n\r\nbody\r\n"
	waitUntil(t, "the mail sink takes a message", func() bool {
		return smtp.SendMail(smtpAddr, nil, "lockstream@demo.example", []string{"resident@demo.example"}, []byte(msg)) == nil
	})
	waitUntil(t, "the mail sink prints it", func() bool {
		return strings.Contains(out.String(), `email   to resident@demo.example  "3 unseen — sim1"`)
	})
	cancel()
	if code := <-exited; code != 0 {
		t.Errorf("webhook-sink exited %d: %s", code, out.String())
	}
}
