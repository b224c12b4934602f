package stream

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of SimulateConfig.
const (
	DefaultSimSensors        = 1000
	DefaultSimRate           = 1000
	DefaultSimFlip           = 0.05
	DefaultSimSilentFraction = 0.01
	DefaultSimSilentAfter    = time.Minute
)

// SimulateConfig describes a simulated fleet.
type SimulateConfig struct {
	// Sensors is the fleet size. Defaults to DefaultSimSensors (1,000).
	Sensors int
	// Rate is the readings per second of the whole fleet. Defaults to
	// DefaultSimRate (1,000).
	Rate float64
	// Flip is the probability that a reading differs from its sensor's last one.
	// Defaults to DefaultSimFlip (0.05); negative means 0.
	Flip float64
	// SilentFraction is the share of sensors that fall silent after SilentAfter,
	// for the heartbeat to notice. Defaults to DefaultSimSilentFraction (0.01);
	// negative means none.
	SilentFraction float64
	// SilentAfter is when the silent sensors stop publishing. Defaults to
	// DefaultSimSilentAfter (1 minute).
	SilentAfter time.Duration
	// Duration stops the simulation; 0 runs until the context is cancelled.
	Duration time.Duration
	// Topic receives the readings. Defaults to TopicReadings.
	Topic string
	// Seed makes a run repeatable. Defaults to a random seed.
	Seed uint64
	// FirstSensor numbers the fleet's sensors from it (SimSensorID(FirstSensor)
	// on), so that two fleets — one on Kafka, one over MQTT — do not share
	// sensors. Defaults to 0.
	FirstSensor int
}

// ReadingSink takes the simulated readings: a *kgo.Client, or anything that
// publishes a record the same way (bridge/mqtt.Publisher, for a fleet that
// speaks MQTT). Produce calls promise once the record is acknowledged or failed;
// Flush waits for every record handed to Produce.
type ReadingSink interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
}

// WithDefaults returns the config with every unset field set to its default.
func (c SimulateConfig) WithDefaults() SimulateConfig {
	if c.Sensors == 0 {
		c.Sensors = DefaultSimSensors
	}
	if c.Rate == 0 {
		c.Rate = DefaultSimRate
	}
	if c.Flip == 0 {
		c.Flip = DefaultSimFlip
	}
	if c.SilentFraction == 0 {
		c.SilentFraction = DefaultSimSilentFraction
	}
	if c.SilentAfter == 0 {
		c.SilentAfter = DefaultSimSilentAfter
	}
	if c.Topic == "" {
		c.Topic = TopicReadings
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// Validate reports the first field that cannot work.
func (c SimulateConfig) Validate() error {
	switch {
	case c.Sensors < 1:
		return fmt.Errorf("simulate config: Sensors: %d, want at least 1", c.Sensors)
	case c.Rate <= 0:
		return fmt.Errorf("simulate config: Rate: %v, want more than 0", c.Rate)
	case c.Flip > 1:
		return fmt.Errorf("simulate config: Flip: %v, want a probability", c.Flip)
	case c.SilentFraction > 1:
		return fmt.Errorf("simulate config: SilentFraction: %v, want a fraction", c.SilentFraction)
	case c.Duration < 0:
		return fmt.Errorf("simulate config: Duration: %v, want 0 or more", c.Duration)
	case c.FirstSensor < 0:
		return fmt.Errorf("simulate config: FirstSensor: %d, want 0 or more", c.FirstSensor)
	}
	return nil
}

// SimSensorID returns the id of the simulated sensor i ("sim" and i in base 36).
func SimSensorID(i int) string {
	return "sim" + strconv.FormatInt(int64(i), 36)
}

// Simulate publishes readings of a simulated fleet through sink at cfg.Rate,
// printing progress to out once a second and a summary at the end. It returns nil
// when ctx is cancelled or Duration has passed, after the readings it produced are
// acknowledged.
func Simulate(ctx context.Context, sink ReadingSink, cfg SimulateConfig, out io.Writer) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	sim := newSimulator(cfg, sink, out)
	start := time.Now()
	const tick = 10 * time.Millisecond
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var lastSent, lastFlips int64
	lastReport := start
	// Readings already handed to the client are delivered even when ctx ends.
	produceCtx := context.WithoutCancel(ctx)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-progress.C:
			sim.report("simulate", now.Sub(lastReport), sim.sent.Load()-lastSent, sim.flips.Load()-lastFlips)
			lastSent, lastFlips, lastReport = sim.sent.Load(), sim.flips.Load(), now
		case now := <-ticker.C:
			if err := sim.produceErr.Load(); err != nil {
				return fmt.Errorf("simulate: producing: %w", *err)
			}
			sim.tick(produceCtx, now, now.Sub(start), tick)
		}
	}

	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := sink.Flush(flushCtx); err != nil {
		return fmt.Errorf("simulate: flushing: %w", err)
	}
	if err := sim.produceErr.Load(); err != nil {
		return fmt.Errorf("simulate: producing: %w", *err)
	}
	sim.report("simulate done", time.Since(start), sim.sent.Load(), sim.flips.Load())
	return nil
}

// simulator is the state of a simulated fleet.
type simulator struct {
	cfg   SimulateConfig
	sink  ReadingSink
	out   io.Writer
	rng   *rand.Rand
	state []int8 // per sensor; -1: not reported yet
	// The last `silent` sensors fall silent after SilentAfter; talking is how
	// many still report.
	silent, talking int
	owed            float64 // readings due but not yet sent
	sent, flips     atomic.Int64
	acked           atomic.Int64
	produceErr      atomic.Pointer[error]
}

func newSimulator(cfg SimulateConfig, sink ReadingSink, out io.Writer) *simulator {
	s := &simulator{cfg: cfg, sink: sink, out: out,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		state:   make([]int8, cfg.Sensors),
		silent:  int(float64(cfg.Sensors) * max(cfg.SilentFraction, 0)),
		talking: cfg.Sensors,
	}
	for i := range s.state {
		s.state[i] = -1
	}
	return s
}

// promise counts an acknowledged reading, or keeps the first error.
func (s *simulator) promise(_ *kgo.Record, err error) {
	if err != nil {
		s.produceErr.CompareAndSwap(nil, &err)
		return
	}
	s.acked.Add(1)
}

// tick sends the readings due in one tick of length d, elapsed after start.
func (s *simulator) tick(ctx context.Context, now time.Time, elapsed, d time.Duration) {
	cfg := s.cfg
	if s.silent > 0 && s.talking == cfg.Sensors && elapsed >= cfg.SilentAfter {
		s.talking = cfg.Sensors - s.silent
		fmt.Fprintf(s.out, "simulate: %d sensors fall silent\n", s.silent)
	}
	if s.talking == 0 {
		return
	}
	s.owed += cfg.Rate * d.Seconds()
	for ; s.owed >= 1; s.owed-- {
		i := s.rng.IntN(s.talking)
		data := s.state[i]
		switch {
		case data < 0:
			data = int8(s.rng.IntN(2))
			s.flips.Add(1)
		case s.rng.Float64() < cfg.Flip:
			data = 1 - data
			s.flips.Add(1)
		}
		s.state[i] = data
		id := SimSensorID(cfg.FirstSensor + i)
		value := fmt.Appendf(nil, `{"sensor_id":%q,"data":%d,"ts":%d}`, id, data, now.UnixMilli())
		s.sink.Produce(ctx, &kgo.Record{Topic: cfg.Topic, Key: []byte(id), Value: value}, s.promise)
		s.sent.Add(1)
	}
}

func (s *simulator) report(prefix string, elapsed time.Duration, readings, changes int64) {
	fmt.Fprintf(s.out, "%s: %d readings sent, %d acknowledged (%.0f/s), %d changes (%.0f/s), %d of %d sensors talking\n",
		prefix, s.sent.Load(), s.acked.Load(), float64(readings)/elapsed.Seconds(), s.flips.Load(),
		float64(changes)/elapsed.Seconds(), s.talking, s.cfg.Sensors)
}
