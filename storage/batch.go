package storage

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// queueExec queues sql in b; its error, if any, comes out of the batch's
// Close wrapped with what.
func queueExec(b *pgx.Batch, what, sql string, args ...any) {
	qq := b.Queue(sql, args...)
	qq.Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}

// queueQuery queues sql in b, whose rows collect reads when the batch's
// results arrive; an error comes out of the batch's Close wrapped with what.
func queueQuery(b *pgx.Batch, what, sql string, collect func(pgx.Rows) error, args ...any) {
	qq := b.Queue(sql, args...)
	qq.Query(collect)
	read := qq.Fn
	qq.Fn = func(br pgx.BatchResults) error {
		if err := read(br); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}

// QueueExec is queueExec for the boxes that own their statements.
func QueueExec(b *pgx.Batch, what, sql string, args ...any) { queueExec(b, what, sql, args...) }

// QueueQuery is queueQuery for the boxes that own their statements.
func QueueQuery(b *pgx.Batch, what, sql string, collect func(pgx.Rows) error, args ...any) {
	queueQuery(b, what, sql, collect, args...)
}
