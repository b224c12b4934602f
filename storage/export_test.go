package storage

import (
	"context"
	"fmt"

	"github.com/lockstream/lockstream/inbox"
)

// ClaimDeliveriesSQL is ClaimDeliveries' statement, for EXPLAIN.
const ClaimDeliveriesSQL = claimDeliveriesSQL

// FinishDeliveriesSQL is FinishDeliveries' statement, for EXPLAIN.
const FinishDeliveriesSQL = finishDeliveriesSQL

// RequeueExpiredLeasesSQL is RequeueExpiredLeases' statement, for EXPLAIN.
const RequeueExpiredLeasesSQL = requeueExpiredLeasesSQL

// EventSeverity grades an event of type typ with data as the inbox's SQL does.
func EventSeverity(ctx context.Context, p *Postgres, typ string, data *int) (string, error) {
	var s string
	err := p.pool.QueryRow(ctx, `SELECT `+fmt.Sprintf(inbox.EventSeverity, "x")+`
		FROM (VALUES ($1::text, $2::int2)) AS x (type, data)`, typ, outboxInt16Ptr(data)).Scan(&s)
	return s, err
}
