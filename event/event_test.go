package event

import (
	"testing"
	"time"
)

func TestIDsAreDeterministicAndDistinct(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ids := map[string]string{
		"changed":       StateChangedID("s1", [16]byte{}, 3, 42),
		"changed again": StateChangedID("s1", [16]byte{}, 3, 43),
		"other sensor":  StateChangedID("s2", [16]byte{}, 3, 42),
		"other part":    StateChangedID("s1", [16]byte{}, 4, 42),
		"other topic":   StateChangedID("s1", [16]byte{1}, 3, 42),
		"another topic": StateChangedID("s1", [16]byte{2}, 3, 42),
		"lost":          ConnectionLostID("s1", at),
		"restored":      ConnectionRestoredID("s1", at),
		"lost later":    ConnectionLostID("s1", at.Add(time.Millisecond)),
	}
	seen := map[string]string{}
	for name, id := range ids {
		if len(id) != 32 {
			t.Errorf("%s: id %q is not 32 hex digits", name, id)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("%s and %s share id %s", name, other, id)
		}
		seen[id] = name
	}
	if StateChangedID("s1", [16]byte{}, 3, 42) != ids["changed"] || StateChangedID("s1", [16]byte{1}, 3, 42) != ids["other topic"] || ConnectionLostID("s1", at) != ids["lost"] {
		t.Error("ids are not deterministic")
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	one := 1
	in := Event{ID: "abc", Type: StateChanged, SensorID: "s1", Data: &one,
		At: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"abc","type":"state_changed","sensor_id":"s1","data":1,"previous":null,"at":"2026-11-22T10:00:00Z","severity":"info"}`
	if string(b) != want {
		t.Fatalf("encoded %s, want %s", b, want)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Type != in.Type || *out.Data != 1 || out.Previous != nil || !out.At.Equal(in.At) {
		t.Fatalf("round trip: got %+v", out)
	}
	for _, bad := range []string{`{`, `{"id":"x","type":"nope","sensor_id":"s","at":"2026-11-22T10:00:00Z"}`, `{"type":"state_changed"}`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%s) succeeded", bad)
		}
	}
}

func TestSeverity(t *testing.T) {
	t.Parallel()
	zero, one := 0, 1
	for _, c := range []struct {
		t    Type
		data *int
		want Severity
	}{
		{ConnectionLost, &zero, Critical}, {ConnectionLost, &one, Warning}, {ConnectionLost, nil, Warning},
		{SensorOpenTooLong, &zero, Critical}, {StateChanged, &zero, Info}, {ConnectionRestored, &zero, Info},
		{EndpointFailing, nil, Warning}, {EndpointDisabled, nil, Warning}, {EndpointRecovered, nil, Info},
	} {
		if got := SeverityOf(c.t, c.data); got != c.want {
			t.Errorf("SeverityOf(%s, %v) = %s, want %s", c.t, c.data, got, c.want)
		}
	}
	// An event written before severity existed gets it on decoding.
	e, err := Decode([]byte(`{"id":"x","type":"connection_lost","sensor_id":"s","data":0,"at":"2026-11-22T10:00:00Z"}`))
	if err != nil || e.Severity != Critical {
		t.Fatalf("Decode of an old loss while unlocked = %+v, %v; want critical", e, err)
	}
	if SensorOpenTooLongID("s", time.Unix(1, 0)) == SensorOpenTooLongID("s", time.Unix(2, 0)) {
		t.Error("two openings share an alert id")
	}
}

func TestRestoredCarriesLostSince(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 12, 14, 0, 0, time.UTC)
	since := at.Add(-(2*time.Hour + 14*time.Minute)).In(time.FixedZone("x", 3600))
	in := Event{ID: "r", Type: ConnectionRestored, SensorID: "s1", At: at, SilentFor: 8040, LostSince: &since}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"r","type":"connection_restored","sensor_id":"s1","data":null,"previous":null,"at":"2026-11-22T12:14:00Z","silent_seconds":8040,"lost_since":"2026-11-22T10:00:00Z","severity":"info"}`
	if string(b) != want {
		t.Fatalf("encoded %s, want %s", b, want)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.LostSince == nil || !out.LostSince.Equal(since) || out.SilentFor != 8040 {
		t.Fatalf("decoded %+v, want lost_since %v", out, since)
	}
}

// An outage reads in its two largest units, rounded down.
func TestOutage(t *testing.T) {
	t.Parallel()
	for secs, want := range map[int64]string{0: "0 s", 45: "45 s", 60: "1 min", 12*60 + 59: "12 min",
		2*3600 + 14*60 + 5: "2 h 14 min", 3 * 3600: "3 h", 3*86400 + 4*3600 + 59: "3 d 4 h", 86400: "1 d"} {
		if got := Outage(secs); got != want {
			t.Errorf("Outage(%d) = %q, want %q", secs, got, want)
		}
	}
	at := time.Date(2026, 11, 22, 12, 14, 0, 0, time.UTC)
	since := at.Add(-8040 * time.Second)
	if got := SilentSeconds(&since, at); got != 8040 {
		t.Errorf("SilentSeconds = %d, want 8040", got)
	}
	if got := SilentSeconds(nil, at); got != 0 {
		t.Errorf("SilentSeconds(nil) = %d, want 0", got)
	}
}
