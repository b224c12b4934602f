package registry_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestSensorLifecycle(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	reg := stores.Registry

	created, err := reg.CreateSensor(ctx, registry.Sensor{ID: "xa7v9Dfadr7H", Address: "1 Main St"})
	if err != nil {
		t.Fatal(err)
	}
	if created.ID != "xa7v9Dfadr7H" || created.Address != "1 Main St" || created.State != nil {
		t.Fatalf("created = %+v", created)
	}
	if _, err := reg.CreateSensor(ctx, registry.Sensor{ID: "xa7v9Dfadr7H", Address: "x"}); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("duplicate create: err = %v, want ErrConflict", err)
	}
	if _, err := reg.GetSensor(ctx, "missing"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get missing: err = %v, want ErrNotFound", err)
	}
	if err := reg.DeleteSensor(ctx, "xa7v9Dfadr7H"); err != nil {
		t.Fatal(err)
	}
	if err := reg.DeleteSensor(ctx, "xa7v9Dfadr7H"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("second delete: err = %v, want ErrNotFound", err)
	}
}

func TestCountAndSearchSensors(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	reg := stores.Registry
	ctx := context.Background()
	ids := []string{"ab", "Ab", "abc", "abZ", "ab9", "abd1", "ac", "a", "b"}
	var sensors []registry.Sensor
	for _, id := range ids {
		sensors = append(sensors, registry.Sensor{ID: id, Address: "x"})
	}
	stores.ImportSensors(t, sensors)
	if n, exact, err := reg.CountSensors(ctx); err != nil || n != int64(len(ids)) || !exact {
		t.Fatalf("CountSensors = %d %v %v, want %d exact", n, exact, err, len(ids))
	}
	search := func(prefix string, page storage.Page) []string {
		t.Helper()
		ss, err := reg.SearchSensors(ctx, prefix, page)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	// Byte order, case-sensitive: digits, then upper case, then lower case.
	if got, want := search("ab", storage.Page{Limit: 10}), []string{"ab", "ab9", "abZ", "abc", "abd1"}; !slices.Equal(got, want) {
		t.Fatalf("search ab = %v, want %v", got, want)
	}
	if got, want := search("ab", storage.Page{After: "abZ", Limit: 1}), []string{"abc"}; !slices.Equal(got, want) {
		t.Fatalf("search ab after abZ = %v, want %v", got, want)
	}
	if got := search("zz", storage.Page{Limit: 10}); len(got) != 0 {
		t.Fatalf("search zz = %v", got)
	}
}
