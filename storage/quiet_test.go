package storage_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// The targets of a claim tell a member's push and email apart and carry its
// quiet hours and whether it is about a critical message the member has not
// seen; a client's own push and a push of no member carry none.
func TestDeliveryTargetsCarryQuietHours(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "qDoor")
	c := f.Client(t, registry.Client{Name: "quiet"}, "qDoor")
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	ann, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: c.ID, Name: "ann", Timezone: "Europe/Paris",
		Email: "ann@example.com", Preferences: registry.DefaultMemberPreferences(),
		PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "ann-phone"}}}, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := domain.QuietHours{From: "22:00", To: "07:00"}
	if _, err := f.reg.UpdateMember(f.ctx, ann.ID, registry.MemberUpdate{QuietHours: &quiet}); err != nil {
		t.Fatal(err)
	}
	insert := func(clientID *string, channel, target string) storage.Delivery {
		t.Helper()
		var id string
		if err := f.pg.Pool().QueryRow(f.ctx, `
			INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
			VALUES (gen_random_uuid(), $1, CASE WHEN $1::uuid IS NOT NULL THEN 'qDoor' END, 'unseen', $2, $3, 'PENDING', now(), now())
			RETURNING id::text`, clientID, channel, target).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return f.get(t, id)
	}
	// An escalation round's email and push: about no one sensor, the
	// episodes after a cursor (member_emails.from_seq).
	roundOf := func(channel, target, kind string, fromSeq, toSeq int64) storage.Delivery {
		t.Helper()
		var id string
		if err := f.pg.Pool().QueryRow(f.ctx, `
			WITH d AS (
				INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
				VALUES (gen_random_uuid(), $1, NULL, 'unseen', $2, $3, 'PENDING', now(), now())
				RETURNING id, event_at
			), m AS (
				INSERT INTO member_emails (delivery_id, event_at, member_id, kind, key, from_seq, to_seq)
				SELECT id, event_at, $4, $5, NULL, $6::bigint, $7::bigint FROM d
			)
			SELECT id::text FROM d`, c.ID, channel, target, ann.ID, kind, fromSeq, toSeq).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return f.get(t, id)
	}
	roundMail, roundPush := roundOf("email", "member:"+ann.ID, "round", 0, 1000), roundOf("swrve", "IOS:ann-phone", "push", 0, 1000)
	laterRound := roundOf("email", "member:"+ann.ID, "round", 1000, 1001) // episodes that begin at seq 1001 only
	push := insert(&c.ID, "swrve", "IOS:ann-phone")
	mail := insert(&c.ID, "email", "member:"+ann.ID)
	stranger := insert(&c.ID, "swrve", "IOS:not-a-member")
	standalone := insert(nil, "swrve", "IOS:ann-phone")
	read := func() map[string]storage.DeliveryTarget {
		t.Helper()
		targets, err := f.pg.DeliveryTargets(f.ctx, []storage.Delivery{push, mail, stranger, standalone, roundMail, roundPush, laterRound})
		if err != nil {
			t.Fatal(err)
		}
		return targets
	}
	targets := read()
	for _, d := range []storage.Delivery{push, mail, roundMail, roundPush, laterRound} {
		if tg := targets[d.ID]; tg.Quiet == nil || *tg.Quiet != quiet || tg.MemberTimezone != "Europe/Paris" || tg.QuietCritical {
			t.Errorf("%s %s: quiet %+v in %q, critical %v; want ann's, not critical", d.Channel, d.Target, tg.Quiet, tg.MemberTimezone, tg.QuietCritical)
		}
	}
	for _, d := range []storage.Delivery{stranger, standalone} {
		if tg := targets[d.ID]; tg.Quiet != nil {
			t.Errorf("%s %s (client %q) carries quiet hours %+v", d.Channel, d.Target, d.ClientID, tg.Quiet)
		}
	}
	// A critical message about the sensor, unseen: both go at once.
	zero := 0
	f.create(t, storage.NotificationInput{EventID: "qLost", Type: "connection_lost", SensorID: "qDoor", Data: &zero,
		At: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)})
	targets = read()
	if !targets[push.ID].QuietCritical || !targets[mail.ID].QuietCritical {
		t.Errorf("after a critical message: push %+v, mail %+v; want both critical", targets[push.ID], targets[mail.ID])
	}
	// A round's email and push whose episodes include its sensor's go at once
	// too; a round of other episodes does not.
	if !targets[roundMail.ID].QuietCritical || !targets[roundPush.ID].QuietCritical || targets[laterRound.ID].QuietCritical {
		t.Errorf("after a critical message: the round's mail %+v, push %+v (want critical), a later round's %+v (want not)",
			targets[roundMail.ID], targets[roundPush.ID], targets[laterRound.ID])
	}
}
