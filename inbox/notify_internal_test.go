package inbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Payloads stay under Postgres's limit whatever the number of members, carry
// each member's messages in seq order, and read back as what was written.
func TestInboxPayloadsRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one := 1
	var added []Added
	members := make([]string, 700)
	for i := range members {
		members[i] = uuid.NewString()
	}
	// Two notifications of one client, listed in the order WriteRows
	// gives (by notification id: the later event's first), then a free-form one.
	for n, notification := range []string{"0000-b", "0000-a"} {
		for _, m := range members {
			added = append(added, Added{notification: notification, Message: Message{
				ID: uuid.NewString(), MemberID: m, Seq: int64(2 - n), ClientID: "client", Type: "state_changed",
				SensorID: "door", SensorAddress: "1 Main St", Data: &one, At: at, Severity: "info", Cause: CauseEvent, CreatedAt: at}})
		}
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
	for i, m := range members[:130] {
		added = append(added, Added{Message: Message{ID: fmt.Sprint(i), MemberID: m, Seq: 3,
			ClientID: "client", Type: "note", Subject: "s", Message: big, At: at, Severity: "info", Cause: CauseEvent}})
	}

	payloads := inboxPayloads(added)
	seen := map[string][]int64{}
	var whole, pointers int
	for _, p := range payloads {
		if len(p) >= 8000 {
			t.Fatalf("payload of %d bytes", len(p))
		}
		news := ParseNews(p)
		for _, m := range news.Messages {
			if m.Type != "state_changed" || m.SensorAddress != "1 Main St" || *m.Data != 1 || !m.At.Equal(at) || m.ID == "" {
				t.Fatalf("message read back: %+v", m)
			}
			seen[m.MemberID] = append(seen[m.MemberID], m.Seq)
			whole++
		}
		for _, n := range news.Pointers {
			seen[n.MemberID] = append(seen[n.MemberID], n.Seq)
			pointers++
		}
	}
	if whole != 1400 || pointers != 130 {
		t.Fatalf("%d messages and %d pointers in %d payloads, want 1400 and 130", whole, pointers, len(payloads))
	}
	for i, m := range members {
		want := []int64{1, 2}
		if i < 130 {
			want = append(want, 3)
		}
		if fmt.Sprint(seen[m]) != fmt.Sprint(want) {
			t.Fatalf("member %d heard seqs %v, want %v", i, seen[m], want)
		}
	}
}

// A shared message's copies are announced without their ids, which whoever
// reads the payload derives from the shared id and the member's, as SQL
// derives them (lockstream_member_message_id): fewer payloads for as many
// members, each under Postgres's limit.
func TestSharedPayloadsCarryTheSharedIDAlone(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	shared := "01a21d8f-19e0-76d3-abf7-2032d65b3384"
	var added []Added
	for i := range 10_000 {
		added = append(added, Added{notification: "n", sharedID: shared, Message: Message{ID: shared,
			MemberID: uuid.NewString(), Seq: int64(1_000_000 + i), ClientID: "client", Type: "state_changed",
			SensorID: "door", At: at, Severity: "info", Cause: CauseEvent, CreatedAt: at}})
	}
	payloads := inboxPayloads(added)
	if len(payloads) > 80 {
		t.Fatalf("%d payloads for 10,000 members", len(payloads))
	}
	var heard int
	for _, p := range payloads {
		if len(p) >= 8000 || strings.Contains(p, `"i":`) {
			t.Fatalf("payload of %d bytes, ids %v", len(p), strings.Contains(p, `"i":`))
		}
		for _, m := range ParseNews(p).Messages {
			a := added[heard]
			if m.MemberID != a.MemberID || m.Seq != a.Seq || m.ID != MemberMessageID(shared, a.MemberID) || m.ID == shared {
				t.Fatalf("message %d read back as %s %s %d, want %s %s %d", heard, m.ID, m.MemberID, m.Seq,
					MemberMessageID(shared, a.MemberID), a.MemberID, a.Seq)
			}
			heard++
		}
	}
	if heard != len(added) {
		t.Fatalf("%d of %d messages heard", heard, len(added))
	}
}
