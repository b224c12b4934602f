package storage_test

import (
	"slices"
	"testing"

	"github.com/lockstream/lockstream/storage"
)

// A month is due at OutboxAnalyzeRows rows, then at each doubling, and no
// more past OutboxAnalyzeMaxRows; months are counted apart.
func TestOutboxGrowthDueAtEachDoublingUpToTheCap(t *testing.T) {
	var g storage.OutboxGrowth
	var dueAt []int
	rows := 0
	for rows < 100_000 {
		rows += 250
		if due := g.Note(map[string]int{"202611": 250}); slices.Contains(due, "202611") {
			dueAt = append(dueAt, rows)
		}
	}
	if want := []int{1_000, 2_000, 4_000, 8_000, 16_000}; !slices.Equal(dueAt, want) {
		t.Fatalf("due at %v rows, want %v", dueAt, want)
	}
	if due := g.Note(map[string]int{"202612": storage.OutboxAnalyzeRows - 1}); len(due) != 0 {
		t.Fatalf("a new month due at %d rows: %v", storage.OutboxAnalyzeRows-1, due)
	}
	if due := g.Note(map[string]int{"202612": 1}); !slices.Equal(due, []string{"202612"}) {
		t.Fatalf("due %v at %d rows of 202612, want it", due, storage.OutboxAnalyzeRows)
	}
}
