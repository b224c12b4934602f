package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestSensorLifecycle(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	pg := stores.Postgres

	created, err := pg.CreateSensor(ctx, storage.Sensor{ID: "xa7v9Dfadr7H", Address: "1 Main St"})
	if err != nil {
		t.Fatal(err)
	}
	if created.ID != "xa7v9Dfadr7H" || created.Address != "1 Main St" || created.State != nil {
		t.Fatalf("created = %+v", created)
	}
	if _, err := pg.CreateSensor(ctx, storage.Sensor{ID: "xa7v9Dfadr7H", Address: "x"}); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("duplicate create: err = %v, want ErrConflict", err)
	}
	if _, err := pg.GetSensor(ctx, "missing"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get missing: err = %v, want ErrNotFound", err)
	}
	if err := pg.DeleteSensor(ctx, "xa7v9Dfadr7H"); err != nil {
		t.Fatal(err)
	}
	if err := pg.DeleteSensor(ctx, "xa7v9Dfadr7H"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("second delete: err = %v, want ErrNotFound", err)
	}
}
