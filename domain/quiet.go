package domain

import "time"

// QuietHours are a member's quiet hours: wall-clock times "HH:MM" in its
// timezone; From after To spans midnight ("22:00" to "07:00"). While they
// last, its non-critical pushes and emails wait for their end.
type QuietHours struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// QuietUntil reports whether now falls in the quiet hours q of a member in
// the IANA zone tz (UTC when unknown), and when they end. The end is the next
// To on the member's wall clock (a day with a DST change keeps the wall time).
func QuietUntil(now time.Time, q QuietHours, tz string) (time.Time, bool) {
	from, okFrom := clockMinutes(q.From)
	to, okTo := clockMinutes(q.To)
	if !okFrom || !okTo || from == to {
		return time.Time{}, false
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		loc = time.UTC
	}
	local := now.In(loc)
	m := local.Hour()*60 + local.Minute()
	endOn := func(days int) time.Time {
		return time.Date(local.Year(), local.Month(), local.Day()+days, to/60, to%60, 0, 0, loc)
	}
	switch {
	case from < to && m >= from && m < to:
		return endOn(0), true
	case from > to && m >= from:
		return endOn(1), true
	case from > to && m < to:
		return endOn(0), true
	}
	return time.Time{}, false
}

// clockMinutes reads "HH:MM" as minutes after midnight.
func clockMinutes(hm string) (int, bool) {
	t, err := time.Parse("15:04", hm)
	if err != nil || len(hm) != 5 {
		return 0, false
	}
	return t.Hour()*60 + t.Minute(), true
}
