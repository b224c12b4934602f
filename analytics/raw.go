package analytics

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// MaxPage is the most rows one page of a raw list holds.
const MaxPage = 1000

// ErrBadCursor is returned for a cursor that this list did not make.
var ErrBadCursor = errors.New("bad cursor")

// ListQuery selects one page of a sensor's raw history: the rows with
// From <= time < To, in the order asked, after the cursor when one is given.
// ClickHouse keeps seconds, so From and To are truncated to the second.
type ListQuery struct {
	SensorID string
	From, To time.Time
	// Limit is the page size, 1 to MaxPage.
	Limit int
	// Asc lists oldest first; the default is newest first.
	Asc bool
	// Types keeps only events of these types (events only); empty keeps all.
	Types []string
	// Cursor is a previous page's NextCursor, or empty for the first page.
	Cursor string
}

// EventPage is a page of events and the cursor of the next one, empty when
// this page is the last.
type EventPage struct {
	Items      []storage.HistoryEvent
	NextCursor string
}

// ReadingPage is a page of readings and the cursor of the next one, empty
// when this page is the last.
type ReadingPage struct {
	Items      []storage.HistoryReading
	NextCursor string
}

// cursor is the key of the last row of a page. Events are keyed (at, id),
// readings (received_at, partition, offset): both orders are total, so a walk
// returns each row once even while rows arrive (a new row sorts after an
// ascending walk's cursor or before a descending one's, never into a page
// already returned). Kind and order are part of it, so a cursor given to the
// other list, or with the order flipped, is refused rather than misread.
type cursor struct {
	Kind      string `json:"k"`
	Asc       bool   `json:"a,omitempty"`
	At        int64  `json:"t"`
	ID        string `json:"i,omitempty"`
	Partition int32  `json:"p,omitempty"`
	Offset    int64  `json:"o,omitempty"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s, kind string, asc bool) (*cursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, ErrBadCursor
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Kind != kind || c.Asc != asc {
		return nil, ErrBadCursor
	}
	return &c, nil
}

// direction returns the comparison that keeps rows past a cursor and the
// ORDER BY direction.
func direction(asc bool) (cmp, dir string) {
	if asc {
		return ">", "ASC"
	}
	return "<", "DESC"
}

// SensorEvents returns a page of the events of q.SensorID. Replays are
// collapsed (SELECT … FINAL): an event id appears once even before ClickHouse
// merged its copies.
func (s *Store) SensorEvents(ctx context.Context, q ListQuery) (EventPage, error) {
	c, err := decodeCursor(q.Cursor, "e", q.Asc)
	if err != nil {
		return EventPage{}, err
	}
	cmp, dir := direction(q.Asc)
	// Times are bound as unix seconds: toDateTime(<integer>) means the same
	// instant whatever the server's timezone, on 18.16 and on current releases.
	where := []string{"sensor_id = ?", "at >= toDateTime(?)", "at < toDateTime(?)"}
	args := []any{q.SensorID, q.From.Unix(), q.To.Unix()}
	if len(q.Types) > 0 {
		where = append(where, "has(?, type)")
		args = append(args, q.Types)
	}
	if c != nil {
		where = append(where, fmt.Sprintf("(at %[1]s toDateTime(?) OR at = toDateTime(?) AND id %[1]s ?)", cmp))
		args = append(args, c.At, c.At, c.ID)
	}
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`
		SELECT id, type, sensor_id, data, previous, at
		FROM events FINAL
		WHERE %s
		ORDER BY at %[2]s, id %[2]s
		LIMIT %d`, strings.Join(where, " AND "), dir, q.Limit+1), args...)
	if err != nil {
		return EventPage{}, fmt.Errorf("querying events of sensor %s: %w", q.SensorID, storage.Unreachable(store, err))
	}
	defer rows.Close()
	var out EventPage
	for rows.Next() {
		var (
			e              storage.HistoryEvent
			data, previous *int8
		)
		if err := rows.Scan(&e.ID, &e.Type, &e.SensorID, &data, &previous, &e.At); err != nil {
			return EventPage{}, fmt.Errorf("reading events of sensor %s: %w", q.SensorID, err)
		}
		e.Data, e.Previous = intPtr(data), intPtr(previous)
		e.At = e.At.UTC()
		out.Items = append(out.Items, e)
	}
	if err := rows.Err(); err != nil {
		return EventPage{}, fmt.Errorf("reading events of sensor %s: %w", q.SensorID, storage.Unreachable(store, err))
	}
	if len(out.Items) > q.Limit {
		out.Items = out.Items[:q.Limit]
		last := out.Items[q.Limit-1]
		out.NextCursor = cursor{Kind: "e", Asc: q.Asc, At: last.At.Unix(), ID: last.ID}.encode()
	}
	return out, nil
}

// SensorReadings returns a page of the readings of q.SensorID received
// (server time) in [From, To). Replays are collapsed (SELECT … FINAL);
// readings received in the same second are ordered by their Kafka partition
// and offset. A reading without device time has a zero TS.
func (s *Store) SensorReadings(ctx context.Context, q ListQuery) (ReadingPage, error) {
	c, err := decodeCursor(q.Cursor, "r", q.Asc)
	if err != nil {
		return ReadingPage{}, err
	}
	cmp, dir := direction(q.Asc)
	where := []string{"sensor_id = ?", "received_at >= toDateTime(?)", "received_at < toDateTime(?)"}
	args := []any{q.SensorID, q.From.Unix(), q.To.Unix()}
	if c != nil {
		where = append(where, fmt.Sprintf(`(received_at %[1]s toDateTime(?) OR received_at = toDateTime(?) AND
			(kafka_partition %[1]s ? OR kafka_partition = ? AND kafka_offset %[1]s ?))`, cmp))
		args = append(args, c.At, c.At, c.Partition, c.Partition, c.Offset)
	}
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`
		SELECT sensor_id, data, ts, received_at, kafka_partition, kafka_offset
		FROM readings FINAL
		WHERE %s
		ORDER BY received_at %[2]s, kafka_partition %[2]s, kafka_offset %[2]s
		LIMIT %d`, strings.Join(where, " AND "), dir, q.Limit+1), args...)
	if err != nil {
		return ReadingPage{}, fmt.Errorf("querying readings of sensor %s: %w", q.SensorID, storage.Unreachable(store, err))
	}
	defer rows.Close()
	var out ReadingPage
	for rows.Next() {
		var (
			r    storage.HistoryReading
			data uint8
		)
		if err := rows.Scan(&r.SensorID, &data, &r.TS, &r.ReceivedAt, &r.Partition, &r.Offset); err != nil {
			return ReadingPage{}, fmt.Errorf("reading readings of sensor %s: %w", q.SensorID, err)
		}
		r.Data = int(data)
		r.TS, r.ReceivedAt = deviceTime(r.TS), r.ReceivedAt.UTC()
		out.Items = append(out.Items, r)
	}
	if err := rows.Err(); err != nil {
		return ReadingPage{}, fmt.Errorf("reading readings of sensor %s: %w", q.SensorID, storage.Unreachable(store, err))
	}
	if len(out.Items) > q.Limit {
		out.Items = out.Items[:q.Limit]
		last := out.Items[q.Limit-1]
		out.NextCursor = cursor{Kind: "r", Asc: q.Asc, At: last.ReceivedAt.Unix(),
			Partition: last.Partition, Offset: last.Offset}.encode()
	}
	return out, nil
}

// deviceTime maps the column's epoch, which stands for "no device time" (the
// column is not nullable), to the zero time.
func deviceTime(ts time.Time) time.Time {
	if ts.Unix() == 0 {
		return time.Time{}
	}
	return ts.UTC()
}

func intPtr(v *int8) *int {
	if v == nil {
		return nil
	}
	i := int(*v)
	return &i
}
