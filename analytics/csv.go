package analytics

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"
)

// CSVHeader is the header row of a summary as CSV: the JSON names.
var CSVHeader = []string{"start", "end", "readings", "changes", "unlocks", "unlocked_seconds", "losses", "lost_seconds",
	"restores", "mean_restore_seconds", "availability"}

// WriteCSV writes a summary's buckets as CSV, times in its location: the
// API's and the console's download are the same file.
func WriteCSV(w io.Writer, s Summary) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return fmt.Errorf("writing summary CSV: %w", err)
	}
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, f := range s.Buckets {
		if err := cw.Write([]string{f.Start.In(s.Location).Format(time.RFC3339), f.End.In(s.Location).Format(time.RFC3339),
			i(f.Readings), i(f.Changes), i(f.Unlocks), i(f.UnlockedSeconds), i(f.Losses), i(f.LostSeconds), i(f.Restores),
			opt(f.MeanRestoreSeconds), opt(f.Availability)}); err != nil {
			return fmt.Errorf("writing summary CSV: %w", err)
		}
	}
	cw.Flush()
	return cw.Error()
}
