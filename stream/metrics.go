package stream

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// ClientMetrics returns the option that exports a Kafka client's metrics
// (connections, bytes and records produced and fetched, buffered records, ...)
// through franz-go's kprom plugin, as lockstream_kafka_* with the label
// client=name, on reg. Clients of one process with different names share the
// metric families; a second live client of the same name is not counted (the
// first keeps its series), and a closed client's series go with it.
func ClientMetrics(reg prometheus.Registerer, name string) kgo.Opt {
	m := kprom.NewMetrics("lockstream",
		kprom.Subsystem("kafka"),
		kprom.Registerer(&sharedRegisterer{reg: reg, mine: map[prometheus.Collector]bool{}}),
		kprom.WithStaticLabel(prometheus.Labels{"client": name}),
	)
	return kgo.WithHooks(m)
}

// sharedRegisterer lets kprom, which registers with MustRegister, run beside
// another client of the same name: a collision is skipped instead of a panic,
// and Unregister only removes what this client registered.
type sharedRegisterer struct {
	reg  prometheus.Registerer
	mu   sync.Mutex
	mine map[prometheus.Collector]bool
}

func (r *sharedRegisterer) Register(c prometheus.Collector) error {
	err := r.reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &are):
		return nil
	case err != nil:
		return err
	}
	r.mu.Lock()
	r.mine[c] = true
	r.mu.Unlock()
	return nil
}

func (r *sharedRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *sharedRegisterer) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	ok := r.mine[c]
	delete(r.mine, c)
	r.mu.Unlock()
	return ok && r.reg.Unregister(c)
}
