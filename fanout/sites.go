package fanout

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage"
)

// The fan-out's part of site events: who a site event reaches and what its
// notifications record. Site outages themselves are the heartbeat's
// (heartbeat/sites_sql.go).

// joinIDs joins sensor ids with commas (ids are letters and digits), for a
// string_to_array parameter.
func joinIDs(ids []string) string { return strings.Join(ids, ",") }

// eventAudience is the comma-separated sensors whose clients an event
// reaches: its own and the ones it lists (ids are letters and digits); a site
// event also reaches the clients of every sensor of its site (in SQL).
func eventAudience(e storage.NotificationInput) string {
	if len(e.Sensors) == 0 {
		return e.SensorID
	}
	return e.SensorID + "," + joinIDs(e.Sensors)
}

// queueSiteAnnotations queues, in the fan-out's transaction, the storing of
// the site and sensors of the batch's site events on their new notifications
// (created, by primary key); nothing when the batch has none.
func queueSiteAnnotations(b *pgx.Batch, events []storage.NotificationInput, created []storage.NewNotification) {
	var ids, sites, sensors []string
	var times []time.Time
	for _, n := range created {
		e := events[n.Event]
		if e.Site == "" && len(e.Sensors) == 0 {
			continue
		}
		ids, sites, sensors, times = append(ids, n.ID), append(sites, e.Site), append(sensors, joinIDs(e.Sensors)), append(times, e.At)
	}
	if len(ids) == 0 {
		return
	}
	storage.QueueExec(b, fmt.Sprintf("recording the sites of %d site notifications", len(ids)), `
		UPDATE notifications n SET site = nullif(x.site, ''), sensors = string_to_array(x.sensors, ',')
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[]) AS x (id, site, sensors, at)
		WHERE n.id = x.id AND n.event_at = x.at AND n.sensors IS NULL`, ids, sites, sensors, times)
}
