package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/registry/secretbox"
)

// Without LOCKSTREAM_SECRET_KEY a key is generated into the data folder, with a
// warning, readable by its owner only, and the same key is used at the next start;
// a key that is set is used as it is, and a malformed one names the setting.
func TestSecretKeyIsGeneratedOnceIntoTheDataFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	t.Setenv("LOCKSTREAM_DATA_DIR", dir)
	t.Setenv("LOCKSTREAM_SECRET_KEY", "")
	load := func() (string, string) {
		t.Helper()
		c := parseNodeSettings(t, usesSecretKey)
		var logs bytes.Buffer
		if _, err := secretBox(c.SecretKey, c.DataDir, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
			t.Fatal(err)
		}
		key, err := os.ReadFile(filepath.Join(dir, "secret.key"))
		if err != nil {
			t.Fatal(err)
		}
		return string(key), logs.String()
	}
	first, logs := load()
	if _, err := secretbox.ParseKey(first); err != nil {
		t.Fatalf("generated key %q: %v", first, err)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "LOCKSTREAM_SECRET_KEY") {
		t.Fatalf("no warning when generating the key: %s", logs)
	}
	if info, err := os.Stat(filepath.Join(dir, "secret.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v, %v", info.Mode(), err)
	}
	again, logs := load()
	if again != first || logs != "" {
		t.Fatalf("second start: key kept %v, logs %q", again == first, logs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("data folder holds %d files, want only the key", len(entries))
	}

	t.Setenv("LOCKSTREAM_SECRET_KEY", "not-a-key")
	c := parseNodeSettings(t, usesSecretKey)
	if _, err := secretBox(c.SecretKey, c.DataDir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_SECRET_KEY") {
		t.Fatalf("malformed key: %v", err)
	}
	t.Setenv("LOCKSTREAM_SECRET_KEY", secretbox.NewKey())
	c = parseNodeSettings(t, usesSecretKey)
	if _, err := secretBox(c.SecretKey, c.DataDir, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("configured key: %v", err)
	}
}
