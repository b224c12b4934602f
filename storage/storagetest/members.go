package storagetest

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// SetMemberTokenUsed sets the member token's last recorded use to age ago, by
// Postgres's clock: tests of idle tokens move the use back instead of waiting.
func SetMemberTokenUsed(ctx context.Context, pg *storage.Postgres, memberID string, age time.Duration) error {
	tag, err := pg.Pool().Exec(ctx, `UPDATE members SET token_used_at = now() - $2::bigint * interval '1 microsecond'
		WHERE id = $1`, memberID, age.Microseconds())
	if err != nil {
		return fmt.Errorf("ageing member %s's token: %w", memberID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("ageing member %s's token: %w", memberID, storage.ErrNotFound)
	}
	return nil
}

// MemberTokenUsedAge returns how long ago, by Postgres's clock, the member
// token's last use was recorded.
func MemberTokenUsedAge(ctx context.Context, pg *storage.Postgres, memberID string) (time.Duration, error) {
	var micros int64
	err := pg.Pool().QueryRow(ctx, `SELECT (extract(epoch FROM now() - token_used_at) * 1e6)::bigint
		FROM members WHERE id = $1`, memberID).Scan(&micros)
	if err != nil {
		return 0, fmt.Errorf("reading member %s's token use: %w", memberID, err)
	}
	return time.Duration(micros) * time.Microsecond, nil
}
