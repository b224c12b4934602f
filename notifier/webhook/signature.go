package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers (https://www.standardwebhooks.com).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
	// HeaderDelivery is the response header a receiver sets to AbortMessage to
	// ask that a notification never be re-sent.
	HeaderDelivery = "webhook-delivery"
	// AbortMessage is HeaderDelivery's value that stops further attempts.
	AbortMessage = "abort-message"
)

// SecretPrefix marks a Standard Webhooks symmetric secret: the rest is the
// base64-encoded HMAC key.
const SecretPrefix = "whsec_"

// DefaultVerifyTolerance is how far a webhook's timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultVerifyTolerance = 5 * time.Minute

// secretBytes is the size of the keys NewSecret makes: the spec asks for 24 to 64.
const secretBytes = 32

// Verification errors, for errors.Is.
var (
	// ErrSignature means no signature in the webhook-signature header matches.
	ErrSignature = errors.New("no matching webhook signature")
	// ErrTimestamp means webhook-timestamp is outside the tolerance: a replay,
	// or clocks far apart.
	ErrTimestamp = errors.New("webhook timestamp outside tolerance")
)

// NewSecret returns a fresh signing secret in the Standard Webhooks form,
// "whsec_" followed by 32 random bytes in base64.
func NewSecret() string {
	key := make([]byte, secretBytes)
	// crypto/rand.Read never fails; it aborts the program if the system's
	// source of randomness does.
	_, _ = rand.Read(key)
	return SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// decodeSecret returns the HMAC key of a "whsec_<base64>" secret. As the
// reference libraries do, the prefix is optional.
func decodeSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("decoding webhook secret: not %s followed by base64: %w", SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, errors.New("decoding webhook secret: empty key")
	}
	return key, nil
}

// Sign returns the webhook-signature header value ("v1,<base64 HMAC-SHA256>") for
// a message id, attempt timestamp and body, signed with secret.
func Sign(secret, id string, timestamp time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp.Unix(), body)), nil
}

// mac computes HMAC-SHA256 of "id.timestamp.body", the content Standard Webhooks signs.
func mac(key []byte, id string, unix int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, unix, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a received webhook: the body must be the exact bytes received, and
// headers must carry webhook-id, webhook-timestamp and a webhook-signature list
// (space separated, as during secret rotation) of which one v1 entry matches.
// The timestamp must be within tolerance of now (DefaultVerifyTolerance when
// tolerance is 0 or less), so a captured request cannot be replayed later.
func Verify(secret string, headers http.Header, body []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultVerifyTolerance
	}
	id, ts, sigs := headers.Get(HeaderID), headers.Get(HeaderTimestamp), headers.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("verifying webhook: missing %s, %s or %s header", HeaderID, HeaderTimestamp, HeaderSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("verifying webhook: %s %q is not unix seconds", HeaderTimestamp, ts)
	}
	if skew := time.Since(time.Unix(unix, 0)); skew > tolerance || skew < -tolerance {
		return fmt.Errorf("verifying webhook: timestamp %d is %s from now: %w", unix, skew.Round(time.Second), ErrTimestamp)
	}
	key, err := decodeSecret(secret)
	if err != nil {
		return fmt.Errorf("verifying webhook: %w", err)
	}
	want := mac(key, id, unix, body)
	for sig := range strings.FieldsSeq(sigs) {
		version, encoded, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("verifying webhook %s: %w", id, ErrSignature)
}
