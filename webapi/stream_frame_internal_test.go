package webapi

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/lockstream/lockstream/inbox"
)

// TestStreamFrameMatchesRender: a message written from its payload's shared
// rendering (appendMessageHead + messageTail) is byte for byte the event
// appendEvent writes of renderMessage.
func TestStreamFrameMatchesRender(t *testing.T) {
	one, zero := 1, 0
	at := time.Date(2026, 11, 27, 5, 0, 0, 123456789, time.UTC)
	lost := at.Add(-2 * time.Hour)
	for _, m := range []inbox.Message{
		{ID: "01a21b8b-eb9a-7cd5-96d9-a01031a2ed2a", Seq: 7, Type: "state_changed", SensorID: "door<1>",
			SensorAddress: `1 "Bench" & Street`, Data: &one, Previous: &zero, At: at, Severity: "info", Cause: "event"},
		{ID: "01a21b8b-eb9a-7cd5-96d9-a01031a2ed2b", Seq: 12345678901, Type: "invoice", Subject: "due <now>",
			Message: json.RawMessage(`{"amount": 3}`), At: at, Severity: "info", Cause: "event"},
		{ID: "01a21b8b-eb9a-7cd5-96d9-a01031a2ed2c", Seq: 1, Type: "connection_restored", SensorID: "d2",
			Data: &one, At: at, Severity: "info", Cause: "new_member", Subject: "back after 2 h",
			Message: json.RawMessage(`{"lost_since":"` + lost.Format(time.RFC3339Nano) + `","silent_seconds":7200}`)},
	} {
		want := string(appendEvent(nil, strconv.FormatInt(m.Seq, 10), "message", renderMessage(m)))
		got := "id: " + strconv.FormatInt(m.Seq, 10) + "\nevent: message\ndata: " +
			string(appendMessageHead(nil, m.ID, m.Seq)) + string(messageTail(m)) + "\n\n"
		if got != want {
			t.Errorf("seq %d:\n got %s\nwant %s", m.Seq, got, want)
		}
	}
}
