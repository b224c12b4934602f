package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lockstream/lockstream/registry/secretbox"
)

// secretKeyFile is where, in the data folder, a generated secret key is kept.
const secretKeyFile = "secret.key"

// secretBox returns the box that encrypts client signing secrets at rest, under
// LOCKSTREAM_SECRET_KEY (the base64 of 32 bytes) or, when that is unset, under the
// key in <data dir>/secret.key, which is generated on first use with a warning:
// every process that reads or writes secrets (api, retrier) must then share that
// folder, so a deployment on several machines sets the variable instead.
func secretBox(secretKey, dataDir string, logger *slog.Logger) (*secretbox.Box, error) {
	if text := secretKey; text != "" {
		key, err := secretbox.ParseKey(text)
		if err != nil {
			return nil, fmt.Errorf("LOCKSTREAM_SECRET_KEY / --secret-key: %w", err)
		}
		return secretbox.New(key)
	}
	path := filepath.Join(dataDir, secretKeyFile)
	text, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeSecretKey(path); err != nil {
			return nil, err
		}
		logger.Warn("LOCKSTREAM_SECRET_KEY is not set: client signing secrets are encrypted under a key generated into the data folder; "+
			"keep it with the data, and set LOCKSTREAM_SECRET_KEY to it wherever api and retrier run on other machines",
			"path", path)
		text, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the secret key: %w", err)
	}
	key, err := secretbox.ParseKey(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return secretbox.New(key)
}

// writeSecretKey creates path holding a fresh key, readable by its owner only. The
// key is written to a temporary file and linked into place, so processes starting
// together agree on one key and none reads a half-written one: the link of all but
// the first fails, and they read the first's.
func writeSecretKey(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the data folder for the secret key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, secretKeyFile+".*")
	if err != nil {
		return fmt.Errorf("writing the secret key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(secretbox.NewKey() + "\n")
	if err := errors.Join(err, tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("writing the secret key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("writing the secret key: %w", err)
	}
	return nil
}
