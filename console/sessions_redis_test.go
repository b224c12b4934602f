package console_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockstream/lockstream/console"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestConsoleSessionLifecycle(t *testing.T) {
	t.Parallel()
	r := console.NewRedisStore(storagetest.New(t).Redis)
	ctx := context.Background()
	s := console.StoredSession{Role: "admin", Credential: "fp", CSRF: "csrf", CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if err := r.CreateConsoleSession(ctx, "h1", s, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateConsoleSession(ctx, "h1", s, time.Minute); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("second create = %v, want ErrConflict", err)
	}
	got, err := r.ConsoleSession(ctx, "h1")
	if err != nil || got != s {
		t.Fatalf("ConsoleSession = %+v, %v; want %+v", got, err, s)
	}
	if err := r.DeleteConsoleSession(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ConsoleSession(ctx, "h1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("after delete = %v, want ErrNotFound", err)
	}
	if err := r.DeleteConsoleSession(ctx, "h1"); err != nil {
		t.Fatalf("deleting twice = %v", err)
	}
}
