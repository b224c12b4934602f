package storage

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SecretKeySize is the size, in bytes, of the key that encrypts webhook signing
// secrets at rest (AES-256-GCM).
const SecretKeySize = 32

// sealedPrefix marks an encrypted secret in the clients table; any other value is
// a plaintext secret stored before encryption (see EncryptPlaintextSecrets).
const sealedPrefix = "lsenc1:"

// SecretBox encrypts client signing secrets for storage: AES-256-GCM, a random
// nonce per value, and the client id as additional data, so a value copied to
// another client's row does not decrypt. It is safe for concurrent use.
type SecretBox struct {
	aead cipher.AEAD
}

// ParseSecretKey decodes a key in its configured form: the standard base64 of
// SecretKeySize bytes (`openssl rand -base64 32` makes one).
func ParseSecretKey(text string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("secret key: not base64: %w", err)
	}
	if len(key) != SecretKeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d (the base64 of %d random bytes)", len(key), SecretKeySize, SecretKeySize)
	}
	return key, nil
}

// NewSecretKey returns a fresh random key in its configured form (base64).
func NewSecretKey() string {
	key := make([]byte, SecretKeySize)
	// crypto/rand.Read never fails; it aborts the program if the system's source
	// of randomness does.
	_, _ = rand.Read(key)
	return base64.StdEncoding.EncodeToString(key)
}

// NewSecretBox returns a SecretBox under key (SecretKeySize bytes).
func NewSecretBox(key []byte) (*SecretBox, error) {
	if len(key) != SecretKeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d", len(key), SecretKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return &SecretBox{aead: aead}, nil
}

// seal encrypts the secret of client clientID.
func (b *SecretBox) seal(clientID, secret string) string {
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := b.aead.Seal(nonce, nonce, []byte(secret), []byte(clientID))
	return sealedPrefix + base64.StdEncoding.EncodeToString(sealed)
}

// open decrypts a stored secret of client clientID; a value stored before
// encryption is returned as it is, and "" stays "".
func (b *SecretBox) open(clientID, stored string) (string, error) {
	encoded, ok := strings.CutPrefix(stored, sealedPrefix)
	if !ok {
		return stored, nil
	}
	sealed, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || len(sealed) < b.aead.NonceSize() {
		return "", fmt.Errorf("decrypting the signing secret of client %s: malformed value", clientID)
	}
	nonce, ciphertext := sealed[:b.aead.NonceSize()], sealed[b.aead.NonceSize():]
	secret, err := b.aead.Open(nil, nonce, ciphertext, []byte(clientID))
	if err != nil {
		return "", fmt.Errorf("decrypting the signing secret of client %s (is LOCKSTREAM_SECRET_KEY the key it was stored with?): %w",
			clientID, err)
	}
	return string(secret), nil
}

// errNoSecretBox is returned by the methods that read or write signing secrets of
// a Postgres opened without WithSecretBox.
var errNoSecretBox = errors.New("signing secrets are encrypted, and this store has no key (storage.WithSecretBox)")

// PostgresOption configures OpenPostgres.
type PostgresOption func(*Postgres)

// WithSecretBox encrypts client signing secrets with box when they are stored and
// decrypts them when they are read. Without it, creating a client, rotating its
// secret and reading delivery targets fail.
func WithSecretBox(box *SecretBox) PostgresOption {
	return func(p *Postgres) { p.secrets = box }
}

// plaintextBatch bounds the rows EncryptPlaintextSecrets reads and writes per
// statement.
const plaintextBatch = 1000

// EncryptPlaintextSecrets encrypts the signing secrets stored in plaintext before
// secrets were encrypted at rest (current and previous ones), a batch of rows per
// two statements, and returns how many clients it changed. Running it again, or in
// several processes at once, is harmless: a row is changed only while it still
// holds the plaintext that was read.
func (p *Postgres) EncryptPlaintextSecrets(ctx context.Context) (int, error) {
	if p.secrets == nil {
		return 0, errNoSecretBox
	}
	total := 0
	after := "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := p.pool.Query(ctx, `
			SELECT id::text, secret, coalesce(previous_secret, '') FROM clients
			WHERE id > $1 AND (secret NOT LIKE 'lsenc1:%' OR previous_secret NOT LIKE 'lsenc1:%')
			ORDER BY id LIMIT $2`, after, plaintextBatch)
		if err != nil {
			return total, fmt.Errorf("reading plaintext secrets: %w", err)
		}
		type stored struct{ id, secret, previous string }
		batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stored, error) {
			var s stored
			err := row.Scan(&s.id, &s.secret, &s.previous)
			return s, err
		})
		if err != nil {
			return total, fmt.Errorf("reading plaintext secrets: %w", err)
		}
		if len(batch) == 0 {
			return total, nil
		}
		cols := make([][]string, 5) // id, old secret, new secret, old previous, new previous
		for _, s := range batch {
			cols[0] = append(cols[0], s.id)
			cols[1] = append(cols[1], s.secret)
			cols[2] = append(cols[2], p.sealPlaintext(s.id, s.secret))
			cols[3] = append(cols[3], s.previous)
			cols[4] = append(cols[4], p.sealPlaintext(s.id, s.previous))
		}
		tag, err := p.pool.Exec(ctx, `
			UPDATE clients c SET secret = u.secret, previous_secret = nullif(u.previous, '')
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[])
			     AS u (id, old_secret, secret, old_previous, previous)
			WHERE c.id = u.id AND c.secret = u.old_secret AND coalesce(c.previous_secret, '') = u.old_previous`,
			cols[0], cols[1], cols[2], cols[3], cols[4])
		if err != nil {
			return total, fmt.Errorf("encrypting plaintext secrets: %w", err)
		}
		total += int(tag.RowsAffected())
		after = batch[len(batch)-1].id
		if len(batch) < plaintextBatch {
			return total, nil
		}
	}
}

// sealPlaintext encrypts a stored value unless it is encrypted already or empty.
func (p *Postgres) sealPlaintext(clientID, stored string) string {
	if stored == "" || strings.HasPrefix(stored, sealedPrefix) {
		return stored
	}
	return p.secrets.seal(clientID, stored)
}
