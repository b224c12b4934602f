package storage

import "time"

// The rows of the history in ClickHouse: the history writer (package history)
// inserts them, the API, the console and the analysts read them.

// HistoryReading is one valid reading as the history keeps it.
type HistoryReading struct {
	SensorID string
	Data     int
	// TS is the device's time; zero when the reading carried none, stored as
	// 1970-01-01 00:00:00 (the column is not nullable).
	TS time.Time
	// ReceivedAt is the reading's Kafka timestamp (server receive time).
	ReceivedAt time.Time
	// Partition and Offset locate the reading in the readings topic; with
	// ReceivedAt they make a replayed reading collapse onto the first copy.
	Partition int32
	Offset    int64
}

// HistoryEvent is one event as the history keeps it.
type HistoryEvent struct {
	ID       string
	Type     string
	SensorID string
	// Data and Previous are nil where the event has none.
	Data     *int
	Previous *int
	At       time.Time
}
