package heartbeat

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SiteOutage is an outage of a site: enough of its sensors lost at once.
type SiteOutage struct {
	// ID is the site_outage event's id (event.SiteOutageID).
	ID   string
	Site string
	// StartedAt is the earliest deadline its sensors missed.
	StartedAt time.Time
	// Sensors lists the lost sensors it covers, in id order.
	Sensors []string
	// RestoredAt is when it ended; zero while it is open.
	RestoredAt time.Time
}

// SiteMembers returns the registered sensors of each of sites, in id order,
// in one query over the site index.
func (p *PostgresStore) SiteMembers(ctx context.Context, sites []string) (map[string][]string, error) {
	out := make(map[string][]string, len(sites))
	if len(sites) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, `
		SELECT site, array_agg(id ORDER BY id) FROM sensors WHERE site = ANY ($1::text[]) GROUP BY site`, sites)
	if err != nil {
		return nil, fmt.Errorf("reading the sensors of %d sites: %w", len(sites), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			site    string
			members []string
		)
		if err := rows.Scan(&site, &members); err != nil {
			return nil, fmt.Errorf("reading the sensors of %d sites: %w", len(sites), err)
		}
		out[site] = members
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the sensors of %d sites: %w", len(sites), err)
	}
	return out, nil
}

// OpenSiteOutages opens the outages given, one per site at most, as decided
// at now (the caller's clock: UnpublishedSiteEvents judges by it): a site that
// has an open outage already keeps it (the partial unique index on open
// outages decides between heartbeat processes racing for the same site). It
// returns the outages this call opened, whose events the caller publishes;
// SiteOutagesListing then tells which losses the open ones cover.
func (p *PostgresStore) OpenSiteOutages(ctx context.Context, outages []SiteOutage, now time.Time) ([]SiteOutage, error) {
	if len(outages) == 0 {
		return nil, nil
	}
	ids := make([]string, len(outages))
	sites := make([]string, len(outages))
	starts := make([]time.Time, len(outages))
	sensors := make([]string, len(outages))
	for i, o := range outages {
		ids[i], sites[i], starts[i] = o.ID, o.Site, o.StartedAt
		sensors[i] = joinIDs(o.Sensors)
	}
	rows, err := p.pool.Query(ctx, `
		INSERT INTO site_outages (id, site, started_at, sensors, created_at)
		SELECT id, site, started_at, string_to_array(sensors, ','), $5
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) AS x (id, site, started_at, sensors)
		ORDER BY site
		ON CONFLICT DO NOTHING
		RETURNING id, site, started_at, sensors, NULL::timestamptz`, ids, sites, starts, sensors, now)
	if err != nil {
		return nil, fmt.Errorf("opening %d site outages: %w", len(outages), err)
	}
	opened, err := collectOutages(rows)
	if err != nil {
		return nil, fmt.Errorf("opening %d site outages: %w", len(outages), err)
	}
	return opened, nil
}

// joinIDs joins sensor ids with commas (ids are letters and digits), for a
// string_to_array parameter.
func joinIDs(ids []string) string { return strings.Join(ids, ",") }

func collectOutages(rows pgx.Rows) ([]SiteOutage, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (SiteOutage, error) {
		var (
			o        SiteOutage
			restored *time.Time
		)
		err := row.Scan(&o.ID, &o.Site, &o.StartedAt, &o.Sensors, &restored)
		if restored != nil {
			o.RestoredAt = *restored
		}
		return o, err
	})
}

// MarkSiteEventsPublished records that the events of these outages are on
// Kafka at at: their site_outage (restored false) or their site_restored
// (true).
func (p *PostgresStore) MarkSiteEventsPublished(ctx context.Context, ids []string, restored bool, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := p.pool.Exec(ctx, `
		UPDATE site_outages SET
			published_at = CASE WHEN $2 THEN published_at ELSE coalesce(published_at, $3) END,
			restore_published_at = CASE WHEN $2 THEN coalesce(restore_published_at, $3) ELSE restore_published_at END
		WHERE id = ANY ($1::text[])`, ids, restored, at)
	if err != nil {
		return fmt.Errorf("marking %d site events published: %w", len(ids), err)
	}
	return nil
}

// UnpublishedSiteEvents returns up to limit outages whose site_outage (restored
// false) or site_restored (true) is not known to be on Kafka though it was
// decided before before: their publisher failed or died.
func (p *PostgresStore) UnpublishedSiteEvents(ctx context.Context, before time.Time, limit int, restored bool) ([]SiteOutage, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT id, site, started_at, sensors, restored_at FROM site_outages
		WHERE CASE WHEN $3 THEN restored_at < $1 AND restore_published_at IS NULL
		           ELSE published_at IS NULL AND created_at < $1 END
		ORDER BY created_at LIMIT $2`, before, limit, restored)
	if err != nil {
		return nil, fmt.Errorf("finding unpublished site events: %w", err)
	}
	out, err := collectOutages(rows)
	if err != nil {
		return nil, fmt.Errorf("finding unpublished site events: %w", err)
	}
	return out, nil
}

// OpenSiteOutagesPublished returns up to limit open outages whose site_outage
// was published, for the sweep that looks for restored sites.
func (p *PostgresStore) OpenSiteOutagesPublished(ctx context.Context, limit int) ([]SiteOutage, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT id, site, started_at, sensors, restored_at FROM site_outages
		WHERE restored_at IS NULL AND published_at IS NOT NULL
		ORDER BY started_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("listing open site outages: %w", err)
	}
	out, err := collectOutages(rows)
	if err != nil {
		return nil, fmt.Errorf("listing open site outages: %w", err)
	}
	return out, nil
}

// CloseSiteOutages ends the open outages ids at at and returns those this call
// ended (another process may have ended some first): the caller publishes
// their site_restored.
func (p *PostgresStore) CloseSiteOutages(ctx context.Context, ids []string, at time.Time) ([]SiteOutage, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := p.pool.Query(ctx, `
		UPDATE site_outages SET restored_at = $2
		WHERE id = ANY ($1::text[]) AND restored_at IS NULL
		RETURNING id, site, started_at, sensors, restored_at`, ids, at)
	if err != nil {
		return nil, fmt.Errorf("closing %d site outages: %w", len(ids), err)
	}
	out, err := collectOutages(rows)
	if err != nil {
		return nil, fmt.Errorf("closing %d site outages: %w", len(ids), err)
	}
	return out, nil
}

// SiteOutagesListing returns, for each loss whose sensor an outage of its site
// lists and which fell while that outage was open (at or after its start,
// before its end), the outage's id: the site_outage delivered instead of the
// loss. One statement. The sweep's judgement asks it about the losses it
// publishes, and the tracker about those it publishes itself (a sensor back
// before the sweep that claimed its loss published it).
func (p *PostgresStore) SiteOutagesListing(ctx context.Context, losses []Deadline) (map[string]string, error) {
	out := map[string]string{}
	if len(losses) == 0 {
		return out, nil
	}
	ids := make([]string, len(losses))
	deadlines := make([]time.Time, len(losses))
	for i, l := range losses {
		ids[i], deadlines[i] = l.SensorID, l.Deadline
	}
	rows, err := p.pool.Query(ctx, `
		SELECT DISTINCT ON (x.sensor_id) x.sensor_id, o.id
		FROM unnest($1::text[], $2::timestamptz[]) AS x (sensor_id, at)
		JOIN sensors s ON s.id = x.sensor_id
		JOIN site_outages o ON o.site = s.site AND x.sensor_id = ANY (o.sensors)
		 AND o.started_at <= x.at AND (o.restored_at IS NULL OR x.at < o.restored_at)
		ORDER BY x.sensor_id, o.started_at DESC`, ids, deadlines)
	if err != nil {
		return nil, fmt.Errorf("looking up the site outages of %d losses: %w", len(losses), err)
	}
	defer rows.Close()
	for rows.Next() {
		var sensor, id string
		if err := rows.Scan(&sensor, &id); err != nil {
			return nil, fmt.Errorf("looking up the site outages of %d losses: %w", len(losses), err)
		}
		out[sensor] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("looking up the site outages of %d losses: %w", len(losses), err)
	}
	return out, nil
}
