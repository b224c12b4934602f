// Package secretbox encrypts client webhook signing secrets at rest. The
// registry seals a secret when it stores one; the outbox's delivery targets
// (storage) open it for the retrier. It is a leaf: both use it, neither owns
// the other.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size, in bytes, of the key that encrypts webhook signing
// secrets at rest (AES-256-GCM).
const KeySize = 32

// sealedPrefix marks an encrypted secret in the clients table; any other value is
// a plaintext secret stored before encryption (see registry's
// EncryptPlaintextSecrets).
const sealedPrefix = "lsenc1:"

// ErrNoBox is returned by the stores that read or write signing secrets but
// were given no Box (storage.WithSecretBox).
var ErrNoBox = errors.New("signing secrets are encrypted, and this store has no key (storage.WithSecretBox)")

// Box encrypts client signing secrets for storage: AES-256-GCM, a random
// nonce per value, and the client id as additional data, so a value copied to
// another client's row does not decrypt. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// ParseKey decodes a key in its configured form: the standard base64 of
// KeySize bytes (`openssl rand -base64 32` makes one).
func ParseKey(text string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("secret key: not base64: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d (the base64 of %d random bytes)", len(key), KeySize, KeySize)
	}
	return key, nil
}

// NewKey returns a fresh random key in its configured form (base64).
func NewKey() string {
	key := make([]byte, KeySize)
	// crypto/rand.Read never fails; it aborts the program if the system's source
	// of randomness does.
	_, _ = rand.Read(key)
	return base64.StdEncoding.EncodeToString(key)
}

// New returns a Box under key (KeySize bytes).
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Sealed reports whether stored is an encrypted value (as Seal makes), not a
// plaintext secret stored before encryption.
func Sealed(stored string) bool { return strings.HasPrefix(stored, sealedPrefix) }

// Seal encrypts the secret of client clientID.
func (b *Box) Seal(clientID, secret string) string {
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := b.aead.Seal(nonce, nonce, []byte(secret), []byte(clientID))
	return sealedPrefix + base64.StdEncoding.EncodeToString(sealed)
}

// Open decrypts a stored secret of client clientID; a value stored before
// encryption is returned as it is, and "" stays "".
func (b *Box) Open(clientID, stored string) (string, error) {
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
