package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/console"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

const (
	// consoleFleet sensors are registered; consoleLost of them are lost, the rest
	// online.
	consoleFleet = 1_000_000
	consoleLost  = 10_000
	// consoleHistory events are in ClickHouse: consoleHistory/consoleFleet per
	// sensor over the last 7 days.
	consoleHistory = 10_000_000
	// consoleClientSensors sensors are watched by the benchmark's client, which has
	// consoleDeliveries notifications (webhook deliveries), consoleFailed failed.
	consoleClientSensors = 10_000
	consoleDeliveries    = 100_000
	consoleFailed        = 1_000
	// consoleMembers members belong to the client (more than a page of the client
	// page's list); after the deliveries above, consoleInbox more events put that
	// many messages in each member's inbox (and one delivery each in the outbox).
	// The first member signs in; consoleSeen of its messages, the oldest, are seen.
	consoleMembers = 60
	consoleInbox   = 1_000
	consoleSeen    = 900
	// consoleMemberToken is the first member's token.
	consoleMemberToken = "lsm_console-bench-member"
)

// BenchmarkConsolePages times the operator console's pages over HTTP (a signed-in
// session, loopback) with 1,000,000 registered sensors (10,000 of them lost) and
// 10,000,000 events in the history, and a client with 100,000 deliveries of which
// 1,000 failed and 60 members with 1,000 inbox messages each; the admin's pages
// and a member's inbox are timed, each signed in as who may open it. Each
// sub-benchmark reports p50, p99 and max of its page; the seeding is not timed.
//
//	go test -run '^$' -bench ConsolePages -benchtime 200x -timeout 60m ./bench/
func BenchmarkConsolePages(b *testing.B) {
	stores := storagetest.New(b)
	seedStart := time.Now()
	clientID := seedConsoleFleet(b, stores)
	b.Logf("seeded in %s", time.Since(seedStart).Round(time.Second))

	hb := heartbeat.NewStores(stores.Postgres, stores.Redis, stores.ClickHouse)
	tracker, err := heartbeat.NewTracker(heartbeat.Config{}, hb.Redis, hb.Postgres, prometheus.NewRegistry(), discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	const token = "console-bench-admin"
	con, err := console.New(console.Config{AdminToken: token}, console.Deps{Registry: stores.Registry,
		Members: stores.Registry, Inbox: inbox.NewPostgresStore(stores.Postgres), Deliveries: stores.Postgres, Sessions: console.NewRedisStore(stores.Redis),
		Heartbeat: hb.Redis, Connections: tracker,
		History: analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()))},
		prometheus.NewRegistry(), discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(con.Handler())
	defer srv.Close()
	admin, member := consoleSignIn(b, srv.URL, token), consoleSignIn(b, srv.URL, consoleMemberToken)
	checkConsoleSeed(b, admin, member, srv.URL, clientID)

	n := 0
	pages := []struct {
		name   string
		client *http.Client
		path   func() string
	}{
		{"Fleet", admin, func() string { return "/console/" }},
		{"FleetLostPage", admin, func() string { return "/console/?lost_after=" + sensorID(n*97%consoleLost) }},
		{"Search", admin, func() string { return "/console/?q=bench00" + fmt.Sprint(n%100) }},
		{"Sensor", admin, func() string { return "/console/sensors/" + sensorID(n*7919%consoleFleet) }},
		{"Clients", admin, func() string { return "/console/clients" }},
		{"Client", admin, func() string { return "/console/clients/" + clientID }},
		{"Inbox", member, func() string { return "/console/inbox" }},
		{"InboxLaterPage", member, func() string { return "/console/inbox?offset=" + fmt.Sprint(50*(1+n%19)) }},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				n++
				start := time.Now()
				resp, err := p.client.Get(srv.URL + p.path())
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				took = append(took, time.Since(start))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d", p.path(), resp.StatusCode)
				}
			}
			slices.Sort(took)
			b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
			b.ReportMetric(ms(took[len(took)*99/100]), "p99-ms")
			b.ReportMetric(ms(took[len(took)-1]), "max-ms")
		})
	}
}

// consoleSignIn signs token in and returns a client holding the session cookie
// (redirects are not followed, so a page that redirects is not timed as another).
func consoleSignIn(b *testing.B, base, token string) *http.Client {
	b.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(base+"/console/login", url.Values{"token": {token}})
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		b.Fatalf("sign-in: %v %v", resp, err)
	}
	resp.Body.Close()
	return client
}

// checkConsoleSeed makes sure the pages see the whole fleet, its history, the
// client's members and the member's inbox before they are timed.
func checkConsoleSeed(b *testing.B, admin, member *http.Client, base, clientID string) {
	b.Helper()
	client := admin
	body := func(path string) string {
		resp, err := client.Get(base + path)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
		}
		return string(raw)
	}
	fleet := body("/console/")
	for _, want := range []string{fmt.Sprintf(`id="count-lost">%d<`, consoleLost), fmt.Sprintf(`id="count-online">%d<`, consoleFleet-consoleLost)} {
		if !strings.Contains(fleet, want) {
			b.Fatalf("the fleet page lacks %s", want)
		}
	}
	want := fmt.Sprintf(`data-total="%d"`, consoleHistory/consoleFleet)
	if sensor := body("/console/sensors/" + sensorID(123_456)); !strings.Contains(sensor, want) {
		b.Fatalf("the sensor page lacks %s", want)
	}
	if page := body("/console/clients/" + clientID); !strings.Contains(page, "Member 00") {
		b.Fatal("the client page lacks its first member")
	}
	client = member
	inbox := body("/console/inbox")
	for _, want := range []string{fmt.Sprintf(`id="inbox-total">%d<`, consoleInbox),
		fmt.Sprintf(`id="inbox-unseen">%d<`, consoleInbox-consoleSeen)} {
		if !strings.Contains(inbox, want) {
			b.Fatalf("the inbox page lacks %s", want)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// seedConsoleFleet fills the stores and returns the client's id.
func seedConsoleFleet(b *testing.B, stores *storagetest.Stores) string {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	sensors := make([]registry.Sensor, consoleFleet)
	for i := range sensors {
		sensors[i] = registry.Sensor{ID: sensorID(i), Address: fmt.Sprintf("%d Bench Street", i)}
	}
	stores.ImportSensors(b, sensors)
	// The first consoleLost sensors are lost, the others online.
	for start := 0; start < consoleFleet; start += 50_000 {
		chunk := make([]heartbeat.Deadline, 0, 50_000)
		for i := start; i < start+50_000; i++ {
			chunk = append(chunk, heartbeat.Deadline{SensorID: sensorID(i), Deadline: now.Add(time.Duration(i%3600) * time.Second)})
		}
		var err error
		if start < consoleLost {
			_, err = heartbeat.NewRedisStore(stores.Redis).LoadHeartbeatLosses(ctx, chunk[:consoleLost])
			chunk = chunk[consoleLost:]
		}
		if err == nil {
			_, err = heartbeat.NewRedisStore(stores.Redis).LoadHeartbeatDeadlines(ctx, chunk)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := heartbeat.NewRedisStore(stores.Redis).SetHeartbeatMarker(ctx, now); err != nil {
		b.Fatal(err)
	}
	seedConsoleHistory(b, stores.ClickHouse, now)
	clientID := seedConsoleOutbox(b, stores.Postgres, stores.PostgresURL, now)
	seedConsoleInbox(b, stores.Postgres, clientID, now)
	return clientID
}

// seedConsoleHistory writes consoleHistory events, consoleHistory/consoleFleet per
// sensor spread over the last 7 days, in batches.
func seedConsoleHistory(b *testing.B, ch *storage.ClickHouse, now time.Time) {
	b.Helper()
	const batch = 500_000
	perSensor := consoleHistory / consoleFleet
	events := make([]storage.HistoryEvent, 0, batch)
	for k := range consoleHistory {
		i, j := k/perSensor, k%perSensor
		data, previous := j%2, 1-j%2
		at := now.Add(-time.Duration((i*31+j*7919)%(7*24*3600)) * time.Second)
		events = append(events, storage.HistoryEvent{ID: fmt.Sprintf("%s-%d", sensorID(i), j), Type: "state_changed",
			SensorID: sensorID(i), Data: &data, Previous: &previous, At: at})
		if len(events) == batch {
			if err := history.NewClickHouseStore(ch).InsertEvents(context.Background(), events); err != nil {
				b.Fatal(err)
			}
			events = events[:0]
		}
	}
}

// seedConsoleOutbox creates a client watching consoleClientSensors sensors with
// consoleDeliveries webhook deliveries, consoleFailed of them FAILED.
func seedConsoleOutbox(b *testing.B, pg *storage.Postgres, pgURL string, now time.Time) string {
	b.Helper()
	ctx := context.Background()
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "Bench Security", WebhookURL: "https://example.com/hook", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range consoleClientSensors {
		if err := registry.New(pg).LinkSensor(ctx, c.ID, sensorID(consoleLost+i)); err != nil {
			b.Fatal(err)
		}
	}
	for start := 0; start < consoleDeliveries; start += 1000 {
		var events []storage.NotificationInput
		for k := start; k < start+1000; k++ {
			data := k % 2
			events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("bench-e%d", k), Type: "state_changed",
				SensorID: sensorID(consoleLost + k%consoleClientSensors), Data: &data,
				At: now.Add(-time.Hour).Add(time.Duration(k) * time.Millisecond)})
		}
		if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events); err != nil {
			b.Fatal(err)
		}
	}
	storagetest.AnalyzeOutbox(b, pgURL)
	claimed, err := pg.ClaimDeliveries(ctx, now.Add(time.Hour), consoleFailed, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range claimed {
		if err := storagetest.FailDelivery(ctx, pg, d.ID, d.Attempts, "400 Bad Request", 400); err != nil {
			b.Fatal(err)
		}
	}
	if len(claimed) != consoleFailed || !strings.HasPrefix(sensorID(0), "bench") {
		b.Fatalf("failed %d deliveries, want %d", len(claimed), consoleFailed)
	}
	return c.ID
}

// seedConsoleInbox gives the client consoleMembers members, then fans out
// consoleInbox events of its sensors as the fan-out does, which puts a message
// per event in every member's inbox; the first member's consoleSeen oldest
// messages are marked seen.
func seedConsoleInbox(b *testing.B, pg *storage.Postgres, clientID string, now time.Time) {
	b.Helper()
	ctx := context.Background()
	// What the fan-out keeps ready in production (fanout.InboxPartitionsAhead).
	if _, err := inbox.NewPostgresStore(pg).CreateInboxPartitions(ctx, now, 3); err != nil {
		b.Fatal(err)
	}
	var first string
	for i := range consoleMembers {
		token := fmt.Sprintf("lsm_console-bench-member-%d", i)
		if i == 0 {
			token = consoleMemberToken
		}
		hash := sha256.Sum256([]byte(token))
		m, _, err := registry.New(pg).CreateMember(ctx, registry.Member{ClientID: clientID, Name: fmt.Sprintf("Member %02d", i),
			Email: fmt.Sprintf("member%d@example.com", i), Timezone: "Europe/Paris",
			Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{})
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			first = m.ID
		}
	}
	events := make([]storage.NotificationInput, consoleInbox)
	for k := range events {
		data := k % 2
		events[k] = storage.NotificationInput{EventID: fmt.Sprintf("bench-inbox-e%d", k), Type: "state_changed",
			SensorID: sensorID(consoleLost + k%consoleClientSensors), Data: &data,
			At: now.Add(-time.Duration(consoleInbox-k) * time.Minute)}
	}
	created, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events)
	if err != nil {
		b.Fatal(err)
	}
	if created.InboxMessages != consoleMembers*consoleInbox {
		b.Fatalf("fan-out put %d messages in inboxes, want %d", created.InboxMessages, consoleMembers*consoleInbox)
	}
	_, oldest, err := inbox.NewPostgresStore(pg).ListInbox(ctx, inbox.Query{MemberID: first, IncludeSeen: true, Sort: inbox.SortTimestamp,
		Limit: consoleSeen})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, len(oldest))
	for i, m := range oldest {
		ids[i] = m.ID
	}
	if n, err := inbox.NewPostgresStore(pg).MarkInbox(ctx, first, inbox.ActionSeen, ids, false); err != nil || n != consoleSeen {
		b.Fatalf("marked %d messages seen (%v), want %d", n, err, consoleSeen)
	}
}
