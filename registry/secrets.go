package registry

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/registry/secretbox"
)

// plaintextBatch bounds the rows EncryptPlaintextSecrets reads and writes per
// statement.
const plaintextBatch = 1000

// EncryptPlaintextSecrets encrypts the signing secrets stored in plaintext before
// secrets were encrypted at rest (current and previous ones), a batch of rows per
// two statements, and returns how many clients it changed. Running it again, or in
// several processes at once, is harmless: a row is changed only while it still
// holds the plaintext that was read.
func (r *Store) EncryptPlaintextSecrets(ctx context.Context) (int, error) {
	if r.box == nil {
		return 0, secretbox.ErrNoBox
	}
	total := 0
	after := "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := r.pool.Query(ctx, `
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
			cols[2] = append(cols[2], r.sealPlaintext(s.id, s.secret))
			cols[3] = append(cols[3], s.previous)
			cols[4] = append(cols[4], r.sealPlaintext(s.id, s.previous))
		}
		tag, err := r.pool.Exec(ctx, `
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
func (r *Store) sealPlaintext(clientID, stored string) string {
	if stored == "" || secretbox.Sealed(stored) {
		return stored
	}
	return r.box.Seal(clientID, stored)
}
