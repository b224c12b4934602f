package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/pgutil"
	"github.com/lockstream/lockstream/storage"
)

// EmailPreference is how a member wants to hear by email of messages it has not
// seen.
type EmailPreference string

// The email preferences.
const (
	EmailOff           EmailPreference = "off"
	EmailOncePerUnread EmailPreference = "once_per_unread"
	EmailDigest        EmailPreference = "digest"
)

// Valid reports whether p is one of the known preferences.
func (p EmailPreference) Valid() bool {
	return p == EmailOff || p == EmailOncePerUnread || p == EmailDigest
}

// MemberPreferences are a member's escalation preferences.
type MemberPreferences struct {
	Email EmailPreference `json:"email"`
	Push  bool            `json:"push"`
	// DigestTimes are wall-clock times ("09:00") in the member's timezone.
	DigestTimes []string `json:"digest_times"`
}

// DefaultMemberPreferences returns the preferences of a member created without
// any: an email once per unread episode, pushes, digests at 09:00 and 17:00.
func DefaultMemberPreferences() MemberPreferences {
	return MemberPreferences{Email: EmailOncePerUnread, Push: true, DigestTimes: []string{"09:00", "17:00"}}
}

// MemberRouting says what a member hears of (docs/DESIGN.md "Routing per
// member"): the zero value lets everything through. A message about a sensor
// reaches the member when its severity is at least MinSeverity and, when Sites
// or Sensors is set, the sensor is one of Sensors or lies in one of Sites; a
// message about no sensor (an operational notice) on its severity alone. The
// SQL function lockstream_routes(member, sensor, site, severity) is the same
// rule for statements (migration 00172).
type MemberRouting struct {
	// Sites and Sensors are nil for every site and sensor.
	Sites   []string `json:"sites"`
	Sensors []string `json:"sensors"`
	// MinSeverity is info (the default: everything), warning or critical.
	MinSeverity string `json:"min_severity"`
}

// Member is a person of a client: it reads the client's notifications in an inbox
// of its own.
type Member struct {
	ID       string
	ClientID string
	Name     string
	// Username is how the CyVerse API v1 names the member (?user=), unique across
	// every client; empty when it has none.
	Username string
	// Email is empty when the member has no address.
	Email string
	// Timezone is an IANA name ("Europe/Paris"); UTC by default.
	Timezone    string
	Preferences MemberPreferences
	// Routing is what the member hears of: inbox, stream, escalation.
	Routing MemberRouting
	// QuietHours hold the member's non-critical pushes and emails; nil: none.
	QuietHours  *domain.QuietHours
	PushTargets []domain.PushTarget
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// MemberUpdate holds the fields of a member that PATCH may change; nil leaves a
// field as it is. An empty Email removes the address; a non-nil PushTargets
// replaces them all.
type MemberUpdate struct {
	Name *string
	// Username "" removes the username.
	Username    *string
	Email       *string
	Timezone    *string
	Preferences *MemberPreferences
	PushTargets *[]domain.PushTarget
	// Routing replaces the member's routing whole.
	Routing *MemberRouting
	// QuietHours sets the quiet hours; a zero QuietHours removes them.
	QuietHours *domain.QuietHours
}

// Backfill says which of a client's recent messages a new member receives: those
// of the last Window, at most Max of them (the newest). A zero Max gives none.
type Backfill struct {
	Window time.Duration
	Max    int
}

// memberColumns are selected by every member query, in scanMember's order.
const memberColumns = `m.id::text, m.client_id::text, m.name, coalesce(m.email, ''), m.timezone, m.preferences,
	m.created_at, m.updated_at,
	(SELECT coalesce(json_agg(json_build_object('platform', t.platform, 'push_key', t.push_key)
	                          ORDER BY t.platform, t.push_key), '[]')
	   FROM member_push_targets t WHERE t.member_id = m.id),
	coalesce(m.username, ''), m.routing_sites, m.routing_sensors, m.routing_min_severity,
	coalesce(m.quiet_from, ''), coalesce(m.quiet_to, '')`

// scanMember scans memberColumns, after extra.
func scanMember(row pgx.Row, extra ...any) (Member, error) {
	var (
		m       Member
		prefs   []byte
		targets []byte
		quiet   domain.QuietHours
	)
	dest := append(extra, &m.ID, &m.ClientID, &m.Name, &m.Email, &m.Timezone, &prefs, &m.CreatedAt, &m.UpdatedAt,
		&targets, &m.Username, &m.Routing.Sites, &m.Routing.Sensors, &m.Routing.MinSeverity,
		&quiet.From, &quiet.To)
	if err := row.Scan(dest...); err != nil {
		return Member{}, err
	}
	if quiet.From != "" {
		m.QuietHours = &quiet
	}
	if err := json.Unmarshal(prefs, &m.Preferences); err != nil {
		return Member{}, fmt.Errorf("decoding preferences: %w", err)
	}
	var decoded []struct {
		Platform domain.Platform `json:"platform"`
		PushKey  string          `json:"push_key"`
	}
	if err := json.Unmarshal(targets, &decoded); err != nil {
		return Member{}, fmt.Errorf("decoding push targets: %w", err)
	}
	m.PushTargets = make([]domain.PushTarget, 0, len(decoded))
	for _, t := range decoded {
		m.PushTargets = append(m.PushTargets, domain.PushTarget{Platform: t.Platform, PushKey: t.PushKey})
	}
	return m, nil
}

// newEpoch returns the epoch of a new inbox: random, so a client can tell an inbox
// that was rebuilt from the one it knew.
func newEpoch() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateMember stores a new member of m.ClientID, whose bearer token hashes to
// tokenHash, with an empty inbox, and copies into that inbox the client's
// messages that backfill asks for, unseen, with cause new_member — all in one
// transaction. It returns the member and how many messages it was given, or
// storage.ErrNotFound when the client does not exist.
func (r *Store) CreateMember(ctx context.Context, m Member, tokenHash []byte, backfill Backfill) (Member, int, error) {
	if uuid.Validate(m.ClientID) != nil {
		return Member{}, 0, fmt.Errorf("creating member of client %s: %w", m.ClientID, storage.ErrNotFound)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Member{}, 0, fmt.Errorf("creating member id: %w", err)
	}
	prefs, err := json.Marshal(m.Preferences)
	if err != nil {
		return Member{}, 0, fmt.Errorf("encoding preferences: %w", err)
	}
	var copied int
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO members (id, client_id, name, email, timezone, preferences, token_hash, username)
			VALUES ($1, $2, $3, nullif($4, ''), $5, $6, $7, nullif($8, ''))`,
			id, m.ClientID, m.Name, m.Email, m.Timezone, prefs, tokenHash, m.Username); err != nil {
			return pgutil.MapError(err)
		}
		// The inbox starts at the client's shared-message counter, read under a
		// share lock held to commit (a shared write in flight is waited for):
		// the shared messages up to it are the client's before this member, and
		// the backfill below, a later statement, sees their notifications.
		if _, err := tx.Exec(ctx, `SELECT FROM clients WHERE id = $1 FOR SHARE`, m.ClientID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO member_inbox (member_id, epoch, mat_cseq)
			SELECT $1, $2, inbox_cseq FROM clients WHERE id = $3`, id, newEpoch(), m.ClientID); err != nil {
			return err
		}
		if err := replacePushTargets(ctx, tx, "member_id", id.String(), m.PushTargets); err != nil {
			return err
		}
		copied, err = inbox.Backfill(ctx, tx, id.String(), m.ClientID, backfill.Window, backfill.Max)
		return err
	})
	if err != nil {
		return Member{}, 0, fmt.Errorf("creating member of client %s: %w", m.ClientID, err)
	}
	created, err := r.GetMember(ctx, id.String())
	return created, copied, err
}

// GetMember returns the member, or storage.ErrNotFound.
func (r *Store) GetMember(ctx context.Context, id string) (Member, error) {
	if uuid.Validate(id) != nil {
		return Member{}, fmt.Errorf("getting member %s: %w", id, storage.ErrNotFound)
	}
	m, err := scanMember(r.pool.QueryRow(ctx, `SELECT `+memberColumns+` FROM members m WHERE m.id = $1`, id))
	if err != nil {
		return Member{}, fmt.Errorf("getting member %s: %w", id, pgutil.MapError(err))
	}
	return m, nil
}

// MemberByUser returns the member a CyVerse API v1 request names: the one whose
// username is user or, failing that, the one whose id it is; storage.ErrNotFound when
// neither exists. A username wins over an id, though the API refuses usernames
// shaped like ids, so both cannot match.
func (r *Store) MemberByUser(ctx context.Context, user string) (Member, error) {
	var id *string
	if uuid.Validate(user) == nil {
		id = &user
	}
	m, err := scanMember(r.pool.QueryRow(ctx, `SELECT `+memberColumns+` FROM members m
		WHERE m.username = $1 OR m.id = $2::uuid
		ORDER BY m.username IS NOT DISTINCT FROM $1 DESC LIMIT 1`, user, id))
	if err != nil {
		return Member{}, fmt.Errorf("finding member %q: %w", user, pgutil.MapError(err))
	}
	return m, nil
}

// DefaultMemberTokenIdle is how long a member token may go unused before it
// stops working, unless configured otherwise (LOCKSTREAM_MEMBER_TOKEN_IDLE):
// the autopush seed drops clients idle 30–60 days.
const DefaultMemberTokenIdle = 60 * 24 * time.Hour

// MemberTokenUseInterval is how often at most a token's use is recorded: an
// hour's precision on a limit of days, for one write an hour per active member
// instead of one per request.
const MemberTokenUseInterval = time.Hour

// ErrTokenIdle is returned for a member token whose last recorded use is older
// than the idle limit: it works again only once rotated.
var ErrTokenIdle = errors.New("the token went unused for too long")

// MemberByTokenHash returns the member whose token hashes to hash, or
// storage.ErrNotFound, and records the token's use (at most once per
// MemberTokenUseInterval, in the same statement). With idle > 0, a token whose
// last recorded use is idle or more ago returns its member with ErrTokenIdle,
// and its use is not recorded: it stays idle until rotated. The times are
// Postgres's clock.
func (r *Store) MemberByTokenHash(ctx context.Context, hash []byte, idle time.Duration) (Member, error) {
	var isIdle bool
	m, err := scanMember(r.pool.QueryRow(ctx, `
		WITH found AS MATERIALIZED (
			SELECT id, $2::bigint > 0 AND token_used_at <= now() - $2::bigint * interval '1 microsecond' AS idle,
			       token_used_at <= now() - $3::bigint * interval '1 microsecond' AS stale
			FROM members WHERE token_hash = $1
		), used AS (
			UPDATE members SET token_used_at = now() FROM found f
			WHERE members.id = f.id AND f.stale AND NOT f.idle
		)
		SELECT f.idle, `+memberColumns+` FROM found f JOIN members m ON m.id = f.id`,
		hash, idle.Microseconds(), MemberTokenUseInterval.Microseconds()), &isIdle)
	if err != nil {
		return Member{}, fmt.Errorf("finding member by token: %w", pgutil.MapError(err))
	}
	if isIdle {
		return m, fmt.Errorf("member %s's token: %w", m.ID, ErrTokenIdle)
	}
	return m, nil
}

// MemberTokenHash returns the hash of the member's current token, or
// storage.ErrNotFound: the console checks a member's session against it, so a rotated
// token or a deleted member ends the session.
func (r *Store) MemberTokenHash(ctx context.Context, id string) ([]byte, error) {
	if uuid.Validate(id) != nil {
		return nil, fmt.Errorf("reading member %s's token: %w", id, storage.ErrNotFound)
	}
	var hash []byte
	if err := r.pool.QueryRow(ctx, `SELECT token_hash FROM members WHERE id = $1`, id).Scan(&hash); err != nil {
		return nil, fmt.Errorf("reading member %s's token: %w", id, pgutil.MapError(err))
	}
	return hash, nil
}

// ListClientMembers returns up to page.Limit members of the client ordered by id
// (creation order), after page.After. It returns storage.ErrNotFound when the client does
// not exist.
func (r *Store) ListClientMembers(ctx context.Context, clientID string, page storage.Page) ([]Member, error) {
	if _, err := r.GetClient(ctx, clientID); err != nil {
		return nil, err
	}
	after := page.After
	if after == "" {
		after = uuid.Nil.String()
	} else if uuid.Validate(after) != nil {
		return nil, fmt.Errorf("listing members after %q: not a member id", after)
	}
	rows, err := r.pool.Query(ctx, `SELECT `+memberColumns+` FROM members m
		WHERE m.client_id = $1 AND m.id > $2 ORDER BY m.id LIMIT $3`, clientID, after, page.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing members of client %s: %w", clientID, err)
	}
	members, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Member, error) { return scanMember(row) })
	if err != nil {
		return nil, fmt.Errorf("listing members of client %s: %w", clientID, err)
	}
	return members, nil
}

// UpdateMember changes the fields set in u and returns the member as it is now.
func (r *Store) UpdateMember(ctx context.Context, id string, u MemberUpdate) (Member, error) {
	if uuid.Validate(id) != nil {
		return Member{}, fmt.Errorf("updating member %s: %w", id, storage.ErrNotFound)
	}
	var prefs []byte
	if u.Preferences != nil {
		var err error
		if prefs, err = json.Marshal(*u.Preferences); err != nil {
			return Member{}, fmt.Errorf("encoding preferences: %w", err)
		}
	}
	rt := newRoutingArgs(u.Routing)
	var quiet domain.QuietHours
	if u.QuietHours != nil {
		quiet = *u.QuietHours
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE members SET
				name = coalesce($2, name),
				email = CASE WHEN $3::text IS NULL THEN email ELSE nullif($3, '') END,
				timezone = coalesce($4, timezone),
				preferences = coalesce($5::jsonb, preferences),
				username = CASE WHEN $6::text IS NULL THEN username ELSE nullif($6, '') END,
				routing_sites = CASE WHEN $7 THEN $8::text[] ELSE routing_sites END,
				routing_sensors = CASE WHEN $7 THEN $9::text[] ELSE routing_sensors END,
				routing_min_severity = CASE WHEN $7 THEN $10 ELSE routing_min_severity END,
				quiet_from = CASE WHEN $11 THEN nullif($12, '') ELSE quiet_from END,
				quiet_to = CASE WHEN $11 THEN nullif($13, '') ELSE quiet_to END,
				updated_at = now()
			WHERE id = $1`, id, u.Name, u.Email, u.Timezone, prefs, u.Username, rt.set, rt.sites, rt.sensors, rt.minSeverity,
			u.QuietHours != nil, quiet.From, quiet.To)
		if err != nil {
			return pgutil.MapError(err)
		}
		if tag.RowsAffected() == 0 {
			return storage.ErrNotFound
		}
		if u.PushTargets != nil {
			return replacePushTargets(ctx, tx, "member_id", id, *u.PushTargets)
		}
		return nil
	})
	if err != nil {
		return Member{}, fmt.Errorf("updating member %s: %w", id, err)
	}
	return r.GetMember(ctx, id)
}

// RotateMemberToken makes tokenHash the member's only token: the old one stops
// working at once; the new one's idle time starts now.
func (r *Store) RotateMemberToken(ctx context.Context, id string, tokenHash []byte) (Member, error) {
	if uuid.Validate(id) != nil {
		return Member{}, fmt.Errorf("rotating token of member %s: %w", id, storage.ErrNotFound)
	}
	tag, err := r.pool.Exec(ctx, `UPDATE members SET token_hash = $2, token_used_at = now(), updated_at = now()
		WHERE id = $1`, id, tokenHash)
	if err != nil {
		return Member{}, fmt.Errorf("rotating token of member %s: %w", id, pgutil.MapError(err))
	}
	if tag.RowsAffected() == 0 {
		return Member{}, fmt.Errorf("rotating token of member %s: %w", id, storage.ErrNotFound)
	}
	return r.GetMember(ctx, id)
}

// DeleteMember removes the member and everything kept for it: deleteMembers.
func (r *Store) DeleteMember(ctx context.Context, id string) error {
	if uuid.Validate(id) != nil {
		return fmt.Errorf("deleting member %s: %w", id, storage.ErrNotFound)
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		n, err := deleteMembers(ctx, tx, membersByID, id)
		if err == nil && n == 0 {
			err = storage.ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting member %s: %w", id, err)
	}
	return nil
}

// The members deleteMembers deletes: the one with an id, or every member of a
// client.
const (
	membersByID     = `id = $1`
	membersByClient = `client_id = $1`
)

// deleteMembers deletes the members matching which (membersByID or
// membersByClient, with key), and everything kept per member, in two
// statements whatever the number of members:
//   - the members; the foreign keys cascade to their push targets, inbox
//     counters (member_inbox), escalation episodes and digest positions;
//   - their inbox messages, which have no foreign key (see the migration). This
//     second statement runs after the first has waited for any inbox writer
//     holding one of the counters, so its snapshot holds what that writer
//     added; a writer coming later finds no counter and adds nothing
//     (inbox.Write).
//
// member_emails rows stay: each is the content of an email delivery, kept and
// retired by retention with it, and the retrier reads it to record a pending
// one as failed because "the member was deleted". Stream tickets (Redis) name
// the member for 60 s at most and open nothing once it is gone. It returns how
// many members it deleted.
func deleteMembers(ctx context.Context, tx pgx.Tx, which, key string) (int, error) {
	rows, err := tx.Query(ctx, `DELETE FROM members WHERE `+which+` RETURNING id::text`, key)
	if err != nil {
		return 0, fmt.Errorf("deleting members: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("deleting members: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	// The primary key's leading member_id finds the rows in every partition.
	if _, err := tx.Exec(ctx, `DELETE FROM inbox_messages WHERE member_id = ANY ($1::uuid[])`, ids); err != nil {
		return 0, fmt.Errorf("deleting the members' inbox messages: %w", err)
	}
	return len(ids), nil
}

// routingArgs are a routing update's parameters; set is false when routing
// is left as it is.
type routingArgs struct {
	set            bool
	sites, sensors []string
	minSeverity    string
}

func newRoutingArgs(r *MemberRouting) routingArgs {
	if r == nil {
		return routingArgs{}
	}
	return routingArgs{set: true, sites: r.Sites, sensors: r.Sensors, minSeverity: cmp.Or(r.MinSeverity, "info")}
}
