package swrve_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/storage"
)

// writeFile writes content to a file in t's temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadPushKeys(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "keys.yaml", `
server:
  port: 8080 # other sections of a larger config are ignored
swrve:
  messagePrototypePushKeys:
    'Hello':
      IOS: d36ae023-010c-4f3a-9bd7-9924a754b4b4
      ANDROID: f31690cb-a763-4259-af18-6aed41afd9ed
    sensor.state_changed:
      IOS: ios-state
`)
	keys, err := swrve.LoadPushKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prototype string
		platform  storage.Platform
		want      string
		ok        bool
	}{
		{"Hello", storage.PlatformIOS, "d36ae023-010c-4f3a-9bd7-9924a754b4b4", true},
		{"Hello", storage.PlatformAndroid, "f31690cb-a763-4259-af18-6aed41afd9ed", true},
		{"sensor.state_changed", storage.PlatformIOS, "ios-state", true},
		{"sensor.state_changed", storage.PlatformAndroid, "", false},
		{"hello", storage.PlatformIOS, "", false},
		{"Hello", "WINDOWS", "", false},
	} {
		got, ok := keys.Lookup(tc.prototype, tc.platform)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%q, %q) = %q, %v; want %q, %v", tc.prototype, tc.platform, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLoadPushKeysErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string // all must appear in the error
	}{
		{"unknown platform", "swrve:\n  messagePrototypePushKeys:\n    Hello:\n      IOS: a\n      WINDOWS: b\n",
			[]string{`["Hello"]`, `unknown platform "WINDOWS"`}},
		{"lower-case platform", "swrve:\n  messagePrototypePushKeys:\n    Hello:\n      ios: a\n",
			[]string{`unknown platform "ios"`}},
		{"empty key", "swrve:\n  messagePrototypePushKeys:\n    Hello:\n      ANDROID: ''\n",
			[]string{`["Hello"][ANDROID]: empty push key`}},
		{"no platforms", "swrve:\n  messagePrototypePushKeys:\n    Hello: {}\n",
			[]string{`["Hello"]: no platforms`}},
		{"empty prototype", "swrve:\n  messagePrototypePushKeys:\n    '':\n      IOS: a\n",
			[]string{"empty message prototype name"}},
		{"no section", "swrve:\n  other: 1\n", []string{"no swrve.messagePrototypePushKeys section"}},
		{"empty file", "", []string{"empty file"}},
		{"not YAML", "swrve: [\n", []string{"parsing YAML"}},
		{"wrong shape", "swrve:\n  messagePrototypePushKeys:\n    Hello: [a, b]\n", []string{"parsing YAML"}},
		{"duplicate prototype", "swrve:\n  messagePrototypePushKeys:\n    Hello:\n      IOS: a\n    Hello:\n      IOS: b\n",
			[]string{"parsing YAML", "already defined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "keys.yaml", tc.yaml)
			keys, err := swrve.LoadPushKeys(path)
			if err == nil {
				t.Fatalf("LoadPushKeys = %v, nil; want an error", keys)
			}
			for _, want := range append(tc.want, path) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "absent.yaml")
		if _, err := swrve.LoadPushKeys(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("LoadPushKeys(absent) error = %v, want one naming %s", err, path)
		}
	})
}
