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
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	state := make([]int8, cfg.Sensors) // -1: not reported yet
	for i := range state {
		state[i] = -1
	}
	silent := int(float64(cfg.Sensors) * max(cfg.SilentFraction, 0))
	// The last `silent` sensors fall silent.
	talking := cfg.Sensors

	var sent, flips, acked atomic.Int64
	var produceErr atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			produceErr.CompareAndSwap(nil, &err)
			return
		}
		acked.Add(1)
	}

	// Readings already handed to the client are delivered even when ctx ends.
	produceCtx := context.WithoutCancel(ctx)
	start := time.Now()
	const tick = 10 * time.Millisecond
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var (
		owed      float64
		lastSent  int64
		lastFlips int64
	)
	report := func(prefix string, elapsed time.Duration, readings, changes int64) {
		fmt.Fprintf(out, "%s: %d readings sent, %d acknowledged (%.0f/s), %d changes (%.0f/s), %d of %d sensors talking\n",
			prefix, sent.Load(), acked.Load(), float64(readings)/elapsed.Seconds(), flips.Load(),
			float64(changes)/elapsed.Seconds(), talking, cfg.Sensors)
	}
	lastReport := start
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-progress.C:
			report("simulate", now.Sub(lastReport), sent.Load()-lastSent, flips.Load()-lastFlips)
			lastSent, lastFlips, lastReport = sent.Load(), flips.Load(), now
		case now := <-ticker.C:
			if err := produceErr.Load(); err != nil {
				return fmt.Errorf("simulate: producing: %w", *err)
			}
			if silent > 0 && talking == cfg.Sensors && now.Sub(start) >= cfg.SilentAfter {
				talking = cfg.Sensors - silent
				fmt.Fprintf(out, "simulate: %d sensors fall silent\n", silent)
			}
			if talking == 0 {
				continue
			}
			owed += cfg.Rate * tick.Seconds()
			for ; owed >= 1; owed-- {
				i := rng.IntN(talking)
				data := state[i]
				switch {
				case data < 0:
					data = int8(rng.IntN(2))
					flips.Add(1)
				case rng.Float64() < cfg.Flip:
					data = 1 - data
					flips.Add(1)
				}
				state[i] = data
				id := SimSensorID(cfg.FirstSensor + i)
				value := fmt.Appendf(nil, `{"sensor_id":%q,"data":%d,"ts":%d}`, id, data, now.UnixMilli())
				sink.Produce(produceCtx, &kgo.Record{Topic: cfg.Topic, Key: []byte(id), Value: value}, promise)
				sent.Add(1)
			}
		}
	}

	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := sink.Flush(flushCtx); err != nil {
		return fmt.Errorf("simulate: flushing: %w", err)
	}
	if err := produceErr.Load(); err != nil {
		return fmt.Errorf("simulate: producing: %w", *err)
	}
	elapsed := time.Since(start)
	report("simulate done", elapsed, sent.Load(), flips.Load())
	return nil
}
