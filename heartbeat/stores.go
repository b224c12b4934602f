package heartbeat

import (
	"github.com/lockstream/lockstream/storage"
)

// Stores are the heartbeat's statements on a process's stores. A part is nil
// when the process did not open its store (the API has no ClickHouse for the
// heartbeat; the consumer needs none).
type Stores struct {
	Redis      *RedisStore
	Postgres   *PostgresStore
	ClickHouse *ClickHouseStore
}

// NewStores returns the heartbeat's stores on the given ones; any may be nil.
func NewStores(pg *storage.Postgres, r *storage.Redis, ch *storage.ClickHouse) Stores {
	var s Stores
	if r != nil {
		s.Redis = NewRedisStore(r)
	}
	if pg != nil {
		s.Postgres = NewPostgresStore(pg)
	}
	if ch != nil {
		s.ClickHouse = NewClickHouseStore(ch)
	}
	return s
}

// Deps are a Daemon's dependencies on these stores, every judgement on (sites,
// maintenance, open too long, stability) when Postgres is there, publishing
// through publisher and judging deadlines by progress (nil: by the clock). A
// missing store leaves its fields nil, for New to name.
func (s Stores) Deps(publisher Publisher, progress Progress) Deps {
	d := Deps{Publisher: publisher, Progress: progress}
	if s.Redis != nil {
		d.Store, d.SiteStore = s.Redis, s.Redis
	}
	if s.Postgres != nil {
		d.Registry, d.States, d.OpenAlerts = s.Postgres, s.Postgres, s.Postgres
		d.Sites, d.Maintenance, d.Flapping = s.Postgres, s.Postgres, s.Postgres
	}
	if s.ClickHouse != nil {
		d.History = s.ClickHouse
	}
	return d
}
