package registry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/registry/secretbox"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// storedSecrets reads the clients table's secret columns as they are stored.
func storedSecrets(t *testing.T, pgURL, clientID string) (secret, previous string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT secret, coalesce(previous_secret, '') FROM clients WHERE id = $1`, clientID).
		Scan(&secret, &previous); err != nil {
		t.Fatal(err)
	}
	return secret, previous
}

func execSQL(t *testing.T, pgURL, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// The secret column never holds the secret: what is stored decrypts only with the
// key and only for its own client, plaintext secrets from before are read and then
// encrypted in place, and a store without the key refuses to handle secrets.
func TestClientSecretsAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	f := &fixture{Fleet: &storagetest.Fleet{Stores: stores, Ctx: ctx}, pg: stores.Postgres, reg: stores.Registry, ctx: ctx}
	for _, id := range []string{"s1", "s2"} {
		if _, err := f.reg.CreateSensor(ctx, registry.Sensor{ID: id, Address: "addr of " + id}); err != nil {
			t.Fatal(err)
		}
	}
	const secretA, secretB = "whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=", "whsec_QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI="
	a := f.Client(t, registry.Client{Name: "a", Secret: secretA}, "s1")
	b := f.Client(t, registry.Client{Name: "b", Secret: secretB}, "s2")
	f.create(t, stateChanged("e1", "s1", 1, outboxT0), stateChanged("e2", "s2", 1, outboxT0))
	deliveryOf := map[string]string{a.ID: f.deliveries(t, a.ID)[0].ID, b.ID: f.deliveries(t, b.ID)[0].ID}
	secretOf := func(clientID string) (string, error) {
		tg, err := f.pg.DeliveryTarget(ctx, deliveryOf[clientID])
		return tg.Secret, err
	}

	storedA, _ := storedSecrets(t, stores.PostgresURL, a.ID)
	if !strings.HasPrefix(storedA, "lsenc1:") || strings.Contains(storedA, strings.TrimPrefix(secretA, "whsec_")) {
		t.Fatalf("stored secret %q is not encrypted", storedA)
	}
	if got, err := secretOf(a.ID); err != nil || got != secretA {
		t.Fatalf("secret read back: %v, %v", got == secretA, err)
	}

	// Another client's ciphertext does not decrypt as this client's.
	storedB, _ := storedSecrets(t, stores.PostgresURL, b.ID)
	execSQL(t, stores.PostgresURL, `UPDATE clients SET secret = $2 WHERE id = $1`, a.ID, storedB)
	if _, err := secretOf(a.ID); err == nil {
		t.Fatal("client b's stored secret decrypted as client a's")
	}

	// A store under another key cannot read it, and says which setting to check.
	other, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := storage.OpenPostgres(ctx, stores.PostgresURL, storage.WithSecretBox(other))
	if err != nil {
		t.Fatal(err)
	}
	defer wrongKey.Close()
	if _, err := wrongKey.DeliveryTarget(ctx, deliveryOf[b.ID]); err == nil || !strings.Contains(err.Error(), "LOCKSTREAM_SECRET_KEY") {
		t.Fatalf("reading under the wrong key: %v", err)
	}
	noKey, err := storage.OpenPostgres(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer noKey.Close()
	if _, err := registry.New(noKey).CreateClient(ctx, registry.Client{Name: "c", WebhookURL: "https://example.com", Secret: secretA}); err == nil {
		t.Fatal("a store without the key stored a secret")
	}

	// Plaintext secrets, as stored before encryption, are read as they are and
	// encrypted by EncryptPlaintextSecrets, previous secrets too.
	execSQL(t, stores.PostgresURL, `UPDATE clients SET secret = $2, previous_secret = $3, previous_secret_until = now() + interval '1 hour'
		WHERE id = $1`, a.ID, secretA, secretB)
	if got, err := secretOf(a.ID); err != nil || got != secretA {
		t.Fatalf("plaintext secret read back: %v, %v", got == secretA, err)
	}
	n, err := f.reg.EncryptPlaintextSecrets(ctx)
	if err != nil || n != 1 {
		t.Fatalf("EncryptPlaintextSecrets = %d, %v; want 1", n, err)
	}
	storedA, previousA := storedSecrets(t, stores.PostgresURL, a.ID)
	if !strings.HasPrefix(storedA, "lsenc1:") || !strings.HasPrefix(previousA, "lsenc1:") {
		t.Fatalf("after encryption: %q, %q", storedA, previousA)
	}
	tg, err := f.pg.DeliveryTarget(ctx, deliveryOf[a.ID])
	if err != nil || tg.Secret != secretA || tg.PreviousSecret != secretB {
		t.Fatalf("after encryption: secret %v, previous %v, %v", tg.Secret == secretA, tg.PreviousSecret == secretB, err)
	}
	if n, err := f.reg.EncryptPlaintextSecrets(ctx); err != nil || n != 0 {
		t.Fatalf("EncryptPlaintextSecrets again = %d, %v; want 0", n, err)
	}
}
