package fanout

import "github.com/lockstream/lockstream/storage"

// OutboxAnalyzeRows is storage.OutboxAnalyzeRows: the outbox rows (handed
// over or not) one fan-out process puts in a month before it has the month
// analyzed, and again at each doubling.
const OutboxAnalyzeRows = storage.OutboxAnalyzeRows

// OutboxAnalyzeMaxRows is storage.OutboxAnalyzeMaxRows: the last doubling at
// which the fan-out has a month analyzed itself.
const OutboxAnalyzeMaxRows = storage.OutboxAnalyzeMaxRows
