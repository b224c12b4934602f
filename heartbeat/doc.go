// Package heartbeat notices sensors that went silent and came back, exactly once each,
// at fleet scale.
//
// Redis holds a sorted set of deadlines (member = sensor id, score = when the sensor
// is due: last seen + its timeout + the coalescing window), a hash of lost sensors
// with the deadline each missed, a set of claimed losses not yet published, and each
// sensor's latest restore for RestoreMemory. The Tracker, called by the consumer once
// per batch, pushes deadlines forward in one round trip and ends losses atomically,
// returning connection_restored events (again, to a consumer replaying a batch after
// a crash). The Daemon sweeps: it claims expired deadlines (at or before the earlier
// of the clock and the state consumer's watermark, so a lagging or stalled consumer
// never makes reporting sensors look silent) in chunks with one Lua
// script per chunk, so several daemons never claim a sensor twice and a sweep costs
// O(expired), and publishes connection_lost events through a Publisher. Event ids
// derive from the sensor and the missed deadline, so retries and replays are dropped
// downstream.
//
// Redis keeps nothing that cannot be rebuilt: when its marker key is missing the
// Daemon rebuilds the sets from Postgres (registered sensors) and ClickHouse (last
// readings, open losses) before sweeping; see Daemon.Rebuild.
//
// The package owns the statements that carry these rules: the Lua scripts and
// their Go (RedisStore: redis_scripts.go, redis.go), the registry reads and the
// site outages, openings, streaks and maintenance windows it keeps
// (PostgresStore: postgres.go, sites_sql.go, fleet_sql.go, maintenance_sql.go),
// and the rebuild's reads of the history (ClickHouseStore). No script or
// statement reads the store's clock to judge time: the caller passes the clock's
// now or the watermark, so tests and a lagging consumer decide what "now" is.
package heartbeat
