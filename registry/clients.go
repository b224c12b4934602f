package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/pgutil"
	"github.com/lockstream/lockstream/registry/secretbox"
	"github.com/lockstream/lockstream/storage"
)

// clientColumns are selected by every client query, in scanClient's order; the secret
// is left out and read only where it may be shown.
const clientColumns = `c.id::text, c.name, c.webhook_url, coalesce(c.email, ''), c.created_at, c.updated_at,
	(SELECT coalesce(json_agg(json_build_object('platform', t.platform, 'push_key', t.push_key)
	                          ORDER BY t.platform, t.push_key), '[]')
	   FROM push_targets t WHERE t.client_id = c.id),
	c.event_types, coalesce(c.rate_limit, 0), c.endpoint_disabled_at, c.webhook_failing_since, c.webhook_failures,
	c.report_weekly, c.report_timezone`

func scanClient(row pgx.Row) (Client, error) {
	var (
		c       Client
		targets []byte
	)
	var disabledAt, failingSince *time.Time
	if err := row.Scan(&c.ID, &c.Name, &c.WebhookURL, &c.Email, &c.CreatedAt, &c.UpdatedAt, &targets,
		&c.EventTypes, &c.RateLimit, &disabledAt, &failingSince, &c.WebhookFailures,
		&c.Report.Weekly, &c.Report.Timezone); err != nil {
		return Client{}, err
	}
	if disabledAt != nil {
		c.EndpointDisabledAt = *disabledAt
	}
	if failingSince != nil {
		c.WebhookFailingSince = *failingSince
	}
	var decoded []struct {
		Platform domain.Platform `json:"platform"`
		PushKey  string          `json:"push_key"`
	}
	if err := json.Unmarshal(targets, &decoded); err != nil {
		return Client{}, fmt.Errorf("decoding push targets: %w", err)
	}
	c.PushTargets = make([]domain.PushTarget, 0, len(decoded))
	for _, t := range decoded {
		c.PushTargets = append(c.PushTargets, domain.PushTarget{Platform: t.Platform, PushKey: t.PushKey})
	}
	return c, nil
}

// CreateClient stores a new client with a fresh time-ordered id and returns it,
// secret included. The secret is stored encrypted (see WithSecretBox).
func (r *Store) CreateClient(ctx context.Context, c Client) (Client, error) {
	if r.box == nil {
		return Client{}, fmt.Errorf("creating client: %w", secretbox.ErrNoBox)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Client{}, fmt.Errorf("creating client id: %w", err)
	}
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx,
			`INSERT INTO clients (id, name, webhook_url, email, secret, event_types, rate_limit)
			 VALUES ($1, $2, $3, nullif($4, ''), $5, $6, nullif($7, 0))`,
			id, c.Name, c.WebhookURL, c.Email, r.box.Seal(id.String(), c.Secret), c.EventTypes, c.RateLimit); err != nil {
			return pgutil.MapError(err)
		}
		return replacePushTargets(ctx, tx, "client_id", id.String(), c.PushTargets)
	})
	if err != nil {
		return Client{}, fmt.Errorf("creating client: %w", err)
	}
	created, err := r.GetClient(ctx, id.String())
	if err != nil {
		return Client{}, err
	}
	created.Secret = c.Secret
	return created, nil
}

// pushTargetOwners are the tables of push targets by owner: a client's or a
// member's. The names are constants, never input.
var pushTargetOwners = map[string]string{"client_id": "push_targets", "member_id": "member_push_targets"}

// replacePushTargets replaces the push targets of the client or member whose
// id is ownerID (ownerColumn "client_id" or "member_id") with targets: two
// statements whatever their number.
func replacePushTargets(ctx context.Context, tx pgx.Tx, ownerColumn, ownerID string, targets []domain.PushTarget) error {
	table, ok := pushTargetOwners[ownerColumn]
	if !ok {
		return fmt.Errorf("replacing push targets: unknown owner %q", ownerColumn)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE `+ownerColumn+` = $1`, ownerID); err != nil {
		return fmt.Errorf("replacing push targets: %w", err)
	}
	if len(targets) == 0 {
		return nil
	}
	platforms := make([]string, len(targets))
	keys := make([]string, len(targets))
	for i, t := range targets {
		platforms[i], keys[i] = string(t.Platform), t.PushKey
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO `+table+` (`+ownerColumn+`, platform, push_key)
		SELECT $1, platform, push_key FROM unnest($2::text[], $3::text[]) AS t (platform, push_key)
		ON CONFLICT DO NOTHING`, ownerID, platforms, keys)
	if err != nil {
		return fmt.Errorf("storing push targets: %w", pgutil.MapError(err))
	}
	return nil
}

// GetClient returns the client without its secret, or storage.ErrNotFound.
func (r *Store) GetClient(ctx context.Context, id string) (Client, error) {
	if uuid.Validate(id) != nil {
		return Client{}, fmt.Errorf("getting client %s: %w", id, storage.ErrNotFound)
	}
	c, err := scanClient(r.pool.QueryRow(ctx, `SELECT `+clientColumns+` FROM clients c WHERE c.id = $1`, id))
	if err != nil {
		return Client{}, fmt.Errorf("getting client %s: %w", id, pgutil.MapError(err))
	}
	return c, nil
}

// ListClients returns up to page.Limit clients ordered by id (creation order), after
// page.After.
func (r *Store) ListClients(ctx context.Context, page storage.Page) ([]Client, error) {
	after := page.After
	if after == "" {
		after = uuid.Nil.String()
	} else if uuid.Validate(after) != nil {
		return nil, fmt.Errorf("listing clients after %q: not a client id", after)
	}
	rows, err := r.pool.Query(ctx,
		`SELECT `+clientColumns+` FROM clients c WHERE c.id > $1 ORDER BY c.id LIMIT $2`, after, page.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing clients: %w", err)
	}
	clients, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Client, error) { return scanClient(row) })
	if err != nil {
		return nil, fmt.Errorf("listing clients: %w", err)
	}
	return clients, nil
}

// UpdateClient changes the fields set in u and returns the client as it is now.
func (r *Store) UpdateClient(ctx context.Context, id string, u ClientUpdate) (Client, error) {
	if uuid.Validate(id) != nil {
		return Client{}, fmt.Errorf("updating client %s: %w", id, storage.ErrNotFound)
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE clients SET
				name = coalesce($2, name),
				webhook_url = coalesce($3, webhook_url),
				email = CASE WHEN $4::text IS NULL THEN email ELSE nullif($4, '') END,
				event_types = CASE WHEN $5 THEN $6::text[] ELSE event_types END,
				rate_limit = CASE WHEN $7::int IS NULL THEN rate_limit ELSE nullif($7, 0) END,
				report_weekly = coalesce($8, report_weekly),
				report_timezone = coalesce($9, report_timezone),
				updated_at = now()
			WHERE id = $1`, id, u.Name, u.WebhookURL, u.Email, u.EventTypes != nil, eventTypesArg(u.EventTypes), u.RateLimit,
			u.ReportWeekly, u.ReportTimezone)
		if err != nil {
			return pgutil.MapError(err)
		}
		if tag.RowsAffected() == 0 {
			return storage.ErrNotFound
		}
		if u.PushTargets != nil {
			return replacePushTargets(ctx, tx, "client_id", id, *u.PushTargets)
		}
		return nil
	})
	if err != nil {
		return Client{}, fmt.Errorf("updating client %s: %w", id, err)
	}
	return r.GetClient(ctx, id)
}

// eventTypesArg is the event_types value of an update: NULL (every type) for
// no change or a nil list.
func eventTypesArg(types *[]string) []string {
	if types == nil {
		return nil
	}
	return *types
}

// RotateClientSecret replaces the client's webhook signing secret. The secret it
// replaces stays valid until keepPreviousUntil (DeliveryTargets returns both until
// then, so webhooks are signed with both); a zero keepPreviousUntil drops it at
// once. A second rotation within the overlap drops the oldest secret.
func (r *Store) RotateClientSecret(ctx context.Context, id, secret string, keepPreviousUntil time.Time) (Client, error) {
	if uuid.Validate(id) != nil {
		return Client{}, fmt.Errorf("rotating secret of client %s: %w", id, storage.ErrNotFound)
	}
	if r.box == nil {
		return Client{}, fmt.Errorf("rotating secret of client %s: %w", id, secretbox.ErrNoBox)
	}
	var until *time.Time
	if !keepPreviousUntil.IsZero() {
		until = &keepPreviousUntil
	}
	tag, err := r.pool.Exec(ctx, `
		UPDATE clients SET previous_secret = CASE WHEN $3::timestamptz IS NULL THEN NULL ELSE secret END,
		                   previous_secret_until = $3, secret = $2, updated_at = now()
		WHERE id = $1`, id, r.box.Seal(strings.ToLower(id), secret), until)
	if err != nil {
		return Client{}, fmt.Errorf("rotating secret of client %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return Client{}, fmt.Errorf("rotating secret of client %s: %w", id, storage.ErrNotFound)
	}
	c, err := r.GetClient(ctx, id)
	if err != nil {
		return Client{}, err
	}
	c.Secret = secret
	return c, nil
}

// DeleteClient removes the client, its push targets, its links and its members
// with everything kept for them (deleteMembers), in one transaction.
func (r *Store) DeleteClient(ctx context.Context, id string) error {
	if uuid.Validate(id) != nil {
		return fmt.Errorf("deleting client %s: %w", id, storage.ErrNotFound)
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		// Locked first, so that no member is added between the members' deletion
		// and the client's (its inbox, backfilled on creation, would be left
		// behind by the cascade): a creation under way is waited for, a later one
		// fails on the foreign key.
		tag, err := tx.Exec(ctx, `SELECT FROM clients WHERE id = $1 FOR UPDATE`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return storage.ErrNotFound
		}
		if _, err := deleteMembers(ctx, tx, membersByClient, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM clients WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting client %s: %w", id, err)
	}
	return nil
}

// LinkSensor makes the client watch the sensor; linking twice is not an error. It
// returns storage.ErrNotFound when either does not exist.
func (r *Store) LinkSensor(ctx context.Context, clientID, sensorID string) error {
	if uuid.Validate(clientID) != nil {
		return fmt.Errorf("linking client %s: %w", clientID, storage.ErrNotFound)
	}
	_, err := r.pool.Exec(ctx,
		`INSERT INTO client_sensors (client_id, sensor_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		clientID, sensorID)
	if err != nil {
		return fmt.Errorf("linking client %s to sensor %s: %w", clientID, sensorID, pgutil.MapError(err))
	}
	return nil
}

// UnlinkSensor stops the client watching the sensor, or returns storage.ErrNotFound when it
// did not.
func (r *Store) UnlinkSensor(ctx context.Context, clientID, sensorID string) error {
	if uuid.Validate(clientID) != nil {
		return fmt.Errorf("unlinking client %s: %w", clientID, storage.ErrNotFound)
	}
	tag, err := r.pool.Exec(ctx,
		`DELETE FROM client_sensors WHERE client_id = $1 AND sensor_id = $2`, clientID, sensorID)
	if err != nil {
		return fmt.Errorf("unlinking client %s from sensor %s: %w", clientID, sensorID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unlinking client %s from sensor %s: %w", clientID, sensorID, storage.ErrNotFound)
	}
	return nil
}

// ListClientSensors returns a page of the sensors the client watches, ordered by id.
// It returns storage.ErrNotFound when the client does not exist.
func (r *Store) ListClientSensors(ctx context.Context, clientID string, page storage.Page) ([]Sensor, error) {
	if _, err := r.GetClient(ctx, clientID); err != nil {
		return nil, err
	}
	rows, err := r.pool.Query(ctx, `SELECT `+sensorColumns+` `+sensorFrom+`
		JOIN client_sensors l ON l.sensor_id = s.id
		WHERE l.client_id = $1 AND s.id > $2 ORDER BY s.id LIMIT $3`, clientID, page.After, page.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing sensors of client %s: %w", clientID, err)
	}
	sensors, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sensor, error) { return scanSensor(row) })
	if err != nil {
		return nil, fmt.Errorf("listing sensors of client %s: %w", clientID, err)
	}
	return sensors, nil
}

// ListSensorClients returns a page of the clients watching the sensor, ordered by id.
// It returns storage.ErrNotFound when the sensor does not exist.
func (r *Store) ListSensorClients(ctx context.Context, sensorID string, page storage.Page) ([]Client, error) {
	if _, err := r.GetSensor(ctx, sensorID); err != nil {
		return nil, err
	}
	after := page.After
	if after == "" {
		after = uuid.Nil.String()
	} else if uuid.Validate(after) != nil {
		return nil, fmt.Errorf("listing clients after %q: not a client id", after)
	}
	rows, err := r.pool.Query(ctx, `SELECT `+clientColumns+` FROM clients c
		JOIN client_sensors l ON l.client_id = c.id
		WHERE l.sensor_id = $1 AND c.id > $2 ORDER BY c.id LIMIT $3`, sensorID, after, page.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing clients of sensor %s: %w", sensorID, err)
	}
	clients, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Client, error) { return scanClient(row) })
	if err != nil {
		return nil, fmt.Errorf("listing clients of sensor %s: %w", sensorID, err)
	}
	return clients, nil
}

// LinkSensors makes the client watch every sensor of ids, in one statement;
// links that exist already are kept. Every sensor must be registered.
func (r *Store) LinkSensors(ctx context.Context, clientID string, ids []string) error {
	if uuid.Validate(clientID) != nil {
		return fmt.Errorf("linking client %s: %w", clientID, storage.ErrNotFound)
	}
	_, err := r.pool.Exec(ctx, `
		INSERT INTO client_sensors (client_id, sensor_id)
		SELECT $1, s FROM unnest($2::text[]) AS s
		ON CONFLICT DO NOTHING`, clientID, ids)
	if err != nil {
		return fmt.Errorf("linking client %s to %d sensors: %w", clientID, len(ids), pgutil.MapError(err))
	}
	return nil
}

// AnalyzeRegistry refreshes the planner statistics of the registry tables
// (sensors, clients, links, states). A deployment's are kept by autovacuum; a
// benchmark that registers a fleet in bulk calls this before it measures, as
// the statements that join them (the retrier's delivery targets, the
// consumer's lookups) are planned as if the tables were empty until then.
func (r *Store) AnalyzeRegistry(ctx context.Context) error {
	if _, err := r.pool.Exec(ctx, `ANALYZE sensors, clients, client_sensors, sensor_state`); err != nil {
		return fmt.Errorf("analyzing the registry: %w", err)
	}
	return nil
}
