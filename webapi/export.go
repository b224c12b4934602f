package webapi

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/httpapi"
)

// analyticsExport handles GET /v1/analytics/export: every reading or event of
// a scope and range, in time order, as CSV or NDJSON, gzip-compressed when the
// request accepts it. It streams: the answer is written while ClickHouse
// sends blocks, at constant memory, without the server's write deadline. An
// error once rows went out can only cut the answer short (the status is sent).
func (s *Server) analyticsExport(w http.ResponseWriter, r *http.Request) error {
	q, err := s.parseAnalyticsQuery(r, nil)
	if err != nil {
		return err
	}
	kind := r.URL.Query().Get("kind")
	if kind != analytics.KindReadings && kind != analytics.KindEvents {
		return httpapi.InvalidParameter("kind must be readings or events, got %q", kind)
	}
	format, err := parseFormat(r, "csv", "ndjson")
	if err != nil {
		return err
	}
	ext, ctype := ".csv", "text/csv; charset=utf-8"
	if format == "ndjson" {
		ext, ctype = ".ndjson", "application/x-ndjson"
	}
	// Nothing is written before the first row: a scope or store that fails
	// first is still a problem answer.
	var (
		enc   *exportEncoder
		close = func() {}
	)
	start := func() {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Content-Disposition", `attachment; filename="`+kind+ext+`"`)
		w.Header().Set("Vary", "Accept-Encoding")
		var out io.Writer = w
		var gz *gzip.Writer
		if acceptsGzip(r) {
			w.Header().Set("Content-Encoding", "gzip")
			// The fastest level: deflate at the default level took 60% of the
			// api's CPU in an export (bench/RESULTS.md), and an export's rows
			// compress well at any level.
			gz, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
			out = gz
		}
		bw := bufio.NewWriterSize(out, 64<<10)
		enc = &exportEncoder{w: bw, csv: format == "csv", kind: kind}
		enc.header()
		close = func() {
			_ = bw.Flush()
			if gz != nil {
				_ = gz.Close()
			}
		}
	}
	err = s.analytics.Export(r.Context(), analytics.ExportQuery{Scope: q.scope, From: q.from, To: q.to, Kind: kind},
		func(row analytics.ExportRow) error {
			if enc == nil {
				start()
			}
			return enc.row(row)
		})
	if err != nil && enc == nil {
		return analyticsError(q.scope, err)
	}
	if enc == nil {
		start()
	}
	close()
	if err != nil {
		s.logger.WarnContext(r.Context(), "export cut short", "scope", q.scope.String(), "err", err)
	}
	return nil
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}

// exportEncoder writes rows with appends into a reused buffer: a row costs no
// allocation beyond the driver's.
type exportEncoder struct {
	w    *bufio.Writer
	csv  bool
	kind string
	buf  []byte
	// ts and received format readings' times: rows come in receive order,
	// about a dozen to a second at fleet scale, so each remembers the last
	// second it formatted.
	ts, received timeText
}

// timeText is the RFC 3339 text of the last second it formatted.
type timeText struct {
	unix int64
	text []byte
}

// appendTo appends t as RFC 3339 (UTC), formatting it only when its second
// differs from the last one's.
func (c *timeText) appendTo(b []byte, t time.Time) []byte {
	if u := t.Unix(); u != c.unix || c.text == nil {
		c.unix, c.text = u, t.AppendFormat(c.text[:0], time.RFC3339)
	}
	return append(b, c.text...)
}

func (e *exportEncoder) header() {
	if !e.csv {
		return
	}
	if e.kind == analytics.KindReadings {
		_, _ = e.w.WriteString("sensor_id,data,ts,received_at\n")
	} else {
		_, _ = e.w.WriteString("id,type,sensor_id,data,previous,at\n")
	}
}

func (e *exportEncoder) row(row analytics.ExportRow) error {
	b := e.buf[:0]
	if e.kind == analytics.KindReadings {
		rd := row.Reading
		if e.csv {
			b = append(b, rd.SensorID...)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(rd.Data), 10)
			b = append(b, ',')
			if !rd.TS.IsZero() {
				b = e.ts.appendTo(b, rd.TS)
			}
			b = append(b, ',')
			b = e.received.appendTo(b, rd.ReceivedAt)
		} else {
			b = append(b, `{"sensor_id":`...)
			b = strconv.AppendQuote(b, rd.SensorID)
			b = append(b, `,"data":`...)
			b = strconv.AppendInt(b, int64(rd.Data), 10)
			b = append(b, `,"ts":`...)
			b = appendJSONTime(b, &e.ts, rd.TS)
			b = append(b, `,"received_at":`...)
			b = appendJSONTime(b, &e.received, rd.ReceivedAt)
			b = append(b, '}')
		}
	} else {
		ev := row.Event
		if e.csv {
			b = append(b, ev.ID...)
			b = append(b, ',')
			b = append(b, ev.Type...)
			b = append(b, ',')
			b = append(b, ev.SensorID...)
			b = append(b, ',')
			b = appendOptInt(b, ev.Data, "")
			b = append(b, ',')
			b = appendOptInt(b, ev.Previous, "")
			b = append(b, ',')
			b = ev.At.AppendFormat(b, time.RFC3339)
		} else {
			body, err := json.Marshal(event.Event{ID: ev.ID, Type: event.Type(ev.Type), SensorID: ev.SensorID, Data: ev.Data, Previous: ev.Previous, At: ev.At})
			if err != nil {
				return err
			}
			b = append(b, body...)
		}
	}
	b = append(b, '\n')
	e.buf = b
	_, err := e.w.Write(b)
	return err
}

func appendJSONTime(b []byte, c *timeText, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = c.appendTo(b, t)
	return append(b, '"')
}

func appendOptInt(b []byte, v *int, none string) []byte {
	if v == nil {
		return append(b, none...)
	}
	return strconv.AppendInt(b, int64(*v), 10)
}
