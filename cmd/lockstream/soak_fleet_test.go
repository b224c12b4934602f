package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge/bridgetest"
)

// soakChannels are the four intakes; a sensor reports through one of them.
var soakChannels = []string{"kaf", "htp", "mqt", "amq"}

// soakFleet is what publishes, reads and pushes during the soak, and the
// record of what it did.
type soakFleet struct {
	t     *testing.T
	n     *soakNode
	cfg   soakConfig
	sinks *soakSinks
	http  *http.Client
	amqp  *soakAMQP
	mqtt  *soakMQTT

	sensors []string            // every sensor, by channel then index
	silent  map[string]bool     // sensors that fall silent in the silences
	clients map[string]string   // client name → id
	linked  map[string][]string // client name → its sensors
	members map[string]soakMember
	ts      atomic.Int64 // the device times of readings: unique
	// mode is soakChaos, then soakFinal: each sensor publishes one last
	// change and then repeats it (so no sensor falls silent while the soak
	// waits for quiescence and checks).
	mode      atomic.Int32
	finalDone sync.WaitGroup

	mu   sync.Mutex
	last map[string]int // each sensor's last published data
	// bridged holds the (sensor, ts) of every good reading published through a
	// bridge: each must reach the readings topic.
	bridged map[string]bool
	// badKafka holds the bad records produced straight to Kafka, by place;
	// badBridge the bad bridge messages, by "<source> <value>".
	badKafka  map[pos]produced
	badBridge map[string]bool
	badHTTP   int // bad readings posted, each answered with a 4xx
	notes     int // free-form notifications to the lazy member, each published twice
	pushes    int // standalone pushes created
	silences  int // silences each silent sensor kept
	readRuns  int // times the reader marked its inbox seen
	published map[string]int
}

// soakMember is a member of client "all": the reader sees its inbox every 2 s,
// the lazy one never does.
type soakMember struct {
	id, token, email, device string
}

func newSoakFleet(n *soakNode, cfg soakConfig, sinks *soakSinks) *soakFleet {
	f := &soakFleet{t: n.t, n: n, cfg: cfg, sinks: sinks, http: &http.Client{Timeout: 5 * time.Second},
		silent: map[string]bool{}, clients: map[string]string{}, linked: map[string][]string{},
		members: map[string]soakMember{}, last: map[string]int{}, bridged: map[string]bool{},
		badKafka: map[pos]produced{}, badBridge: map[string]bool{}, published: map[string]int{}}
	f.ts.Store(1795341600000)
	for _, ch := range soakChannels {
		for i := range cfg.perChannel {
			id := fmt.Sprintf("%s%03d", ch, i)
			f.sensors = append(f.sensors, id)
			if i == 0 {
				f.silent[id] = true
			}
		}
	}
	return f
}

// setUp registers the sensors and two clients (one linked to every sensor,
// one to every other), each with a webhook, and the members of the first.
func (f *soakFleet) setUp() {
	n := &deliveryNode{t: f.t, h: f.n.h, api: f.n.apis[0]}
	for _, s := range f.sensors {
		n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": s, "address": "1 " + s + " Street"}, http.StatusCreated)
	}
	for _, name := range []string{"all", "half"} {
		c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": name, "webhook_url": f.sinks.hooks.url(name)}, http.StatusCreated)
		f.clients[name] = c["id"].(string)
		f.sinks.hooks.setSecret(name, c["secret"].(string))
		for i, s := range f.sensors {
			if name == "all" || i%2 == 0 {
				n.call("PUT", "/v1/clients/"+f.clients[name]+"/sensors/"+s, deliveryAdminToken, nil, http.StatusNoContent)
				f.linked[name] = append(f.linked[name], s)
			}
		}
	}
	for _, who := range []string{"reader", "lazy"} {
		m := soakMember{email: who + "@soak.example", device: "soak-" + who}
		m.id, m.token = n.member(f.clients["all"], map[string]any{"name": who, "email": m.email,
			"push_targets": []map[string]any{{"platform": "IOS", "push_key": m.device}}})
		f.members[who] = m
	}
	f.amqp = &soakAMQP{url: f.n.rabbit.URL, exchange: f.n.names.exchange}
	f.mqtt = &soakMQTT{url: f.n.mosquitto.URL, clientID: "soak-fleet-" + bridgetest.Suffix(f.t)}
	f.t.Cleanup(f.amqp.close)
	f.t.Cleanup(f.mqtt.close)
}

const (
	soakChaos int32 = iota
	soakFinal
)

// run starts the fleet's goroutines: the readings and the reader go on until
// the test ends, the pushes until chaos ends.
func (f *soakFleet) run(chaos context.Context, started time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f.t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	f.finalDone.Add(len(soakChannels))
	for c, ch := range soakChannels {
		rng := rand.New(rand.NewPCG(f.cfg.seed, uint64(10+c)))
		wg.Go(func() { f.publishLoop(ctx, ch, rng, started) })
	}
	wg.Go(func() { f.readLoop(ctx) })
	wg.Go(func() { f.pushLoop(chaos) })
}

// final switches the fleet to its last change and waits until every sensor
// published it; it returns what each sensor must end in.
func (f *soakFleet) final() map[string]int {
	f.mode.Store(soakFinal)
	f.finalDone.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.last)
}

// silenceAt reports whether the silent sensors are in a silence at elapsed,
// and how many silences have begun by then (of those that end at least 10 s
// before the chaos does).
func (f *soakFleet) silenceAt(elapsed time.Duration) (int, bool) {
	for k := 0; ; k++ {
		start := 10*time.Second + time.Duration(k)*f.cfg.silencePeriod
		// A silence ends at least 10 s before the chaos does, so its restore
		// comes from a reading of the chaos.
		if start+f.cfg.silence+10*time.Second > f.cfg.duration {
			return k, false
		}
		if elapsed >= start && elapsed < start+f.cfg.silence {
			return k + 1, true
		}
		if elapsed < start {
			return k, false
		}
	}
}

// publishLoop publishes a round of the channel's sensors every 2 s: during
// the chaos each reports its state, flipped a third of the time, and every
// fifth round carries a bad input; then one round flips every sensor, and the
// rounds after it repeat the last states.
func (f *soakFleet) publishLoop(ctx context.Context, ch string, rng *rand.Rand, started time.Time) {
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	finalized := false
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		chaos := f.mode.Load() == soakChaos
		k, quiet := f.silenceAt(time.Since(started))
		if chaos {
			f.mu.Lock()
			f.silences = max(f.silences, k)
			f.mu.Unlock()
		}
		for i := range f.cfg.perChannel {
			id := fmt.Sprintf("%s%03d", ch, i)
			if chaos && quiet && f.silent[id] {
				continue
			}
			f.mu.Lock()
			data, known := f.last[id]
			f.mu.Unlock()
			switch {
			case !known:
				data = rng.IntN(2)
			case chaos && rng.IntN(3) == 0, !chaos && !finalized:
				data = 1 - data
			}
			if !f.publish(ctx, ch, id, data, chaos) {
				return
			}
		}
		if !chaos && !finalized {
			finalized = true
			f.finalDone.Done()
		}
		if chaos && round%5 == 4 && !f.publishBad(ctx, ch, round/5) {
			return
		}
		if chaos && ch == "amq" && round%5 == 2 && !f.publishNote(ctx, round/5) {
			return
		}
	}
}

// publish sends one good reading through the channel, retrying (through the
// other API, for HTTP) until it is taken; false once ctx ended.
func (f *soakFleet) publish(ctx context.Context, ch, id string, data int, chaos bool) bool {
	ts := f.ts.Add(1)
	value := fmt.Appendf(nil, `{"sensor_id":%q,"data":%d,"ts":%d}`, id, data, ts)
	for try := 0; ; try++ {
		if ctx.Err() != nil {
			return false
		}
		var ok bool
		switch ch {
		case "kaf":
			ok = f.produce(ctx, id, value) != nil
		case "htp":
			ok = f.post(ctx, f.n.apis[try%len(f.n.apis)], "/v1/readings", deliveryIngestToken, value) == http.StatusAccepted
		case "mqt":
			ok = f.mqtt.publish(ctx, f.n.names.topicPrefix+id, value)
		case "amq":
			ok = f.amqp.publish(ctx, "events.sensor.update.reading", soakReading(value))
		}
		if ok {
			break
		}
		time.Sleep(200 * time.Millisecond) // before the next try
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last[id] = data
	f.published[ch]++
	if (ch == "mqt" || ch == "amq") && chaos {
		f.bridged[fmt.Sprintf("%s %d", id, ts)] = true
	}
	return true
}

// produce writes one record to the readings topic and returns where it went
// (nil if the produce failed).
func (f *soakFleet) produce(ctx context.Context, key string, value []byte) *pos {
	rec := &kgo.Record{Topic: f.n.kafka.ReadingsTopic(), Key: []byte(key), Value: value}
	if key == "" {
		rec.Key = nil
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := f.n.admin.ProduceSync(pctx, rec).FirstErr(); err != nil {
		return nil
	}
	return &pos{rec.Partition, rec.Offset}
}

// post sends body to an API and returns the status (0 on a transport error).
func (f *soakFleet) post(ctx context.Context, api, path, token string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+path, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.http.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// publishBad sends the k-th bad input of the channel; false once ctx ended.
func (f *soakFleet) publishBad(ctx context.Context, ch string, k int) bool {
	id := ch + "000"
	switch ch {
	case "kaf":
		bad := badReading(k, fmt.Sprintf("kaf%03d", k%f.cfg.perChannel))
		var where *pos
		for where == nil {
			if ctx.Err() != nil {
				return false
			}
			where = f.produce(ctx, string(bad.key), bad.value)
		}
		f.mu.Lock()
		f.badKafka[*where] = produced{record: bad, partition: where.partition, offset: where.offset}
		f.mu.Unlock()
	case "htp":
		body := []byte(fmt.Sprintf(`{"sensor_id":%q,"data":%d}`, id, 2+k))
		for try := 0; ; try++ {
			if ctx.Err() != nil {
				return false
			}
			status := f.post(ctx, f.n.apis[try%len(f.n.apis)], "/v1/readings", deliveryIngestToken, body)
			if status >= 400 && status < 500 {
				break
			}
			if status != 0 && status < 500 {
				f.t.Errorf("bad reading %s over HTTP answered %d, want a 4xx problem", body, status)
				break
			}
			time.Sleep(200 * time.Millisecond) // before the next try
		}
		f.mu.Lock()
		f.badHTTP++
		f.mu.Unlock()
	case "mqt":
		topic := f.n.names.topicPrefix + id
		value := []byte(fmt.Sprintf("not json %d", k))
		if k%2 == 1 {
			value = fmt.Appendf(nil, `{"sensor_id":%q,"data":7,"ts":%d}`, id, f.ts.Add(1))
		}
		if !retryPublish(ctx, func() bool { return f.mqtt.publish(ctx, topic, value) }) {
			return false
		}
		f.addBadBridge("mqtt:"+topic, value)
	case "amq":
		key, value := "events.sensor.update.reading", []byte(fmt.Sprintf("not json %d", k))
		switch k % 3 {
		case 1:
			value = fmt.Appendf(nil, `{"sensor_id":%q,"data":3,"ts":%d}`, id, f.ts.Add(1))
		case 2:
			key, value = "events.notification.update.alert", fmt.Appendf(nil, `{"nonsense":%d}`, k)
		}
		if !retryPublish(ctx, func() bool { return f.amqp.publish(ctx, key, soakReading(value)) }) {
			return false
		}
		f.addBadBridge("amqp:"+key, value)
	}
	return true
}

// publishNote publishes the k-th free-form notification to the lazy member
// over AMQP twice, with one message-id: it must be recorded once; false once
// ctx ended.
func (f *soakFleet) publishNote(ctx context.Context, k int) bool {
	body := fmt.Appendf(nil, `{"member_id":%q,"type":"alert","subject":"soak note %d","message":"note %d","email":true}`,
		f.members["lazy"].id, k, k)
	msg := amqp091.Publishing{ContentType: "application/json", DeliveryMode: amqp091.Persistent,
		MessageId: fmt.Sprintf("soak-note-%d", k), Body: body}
	for range 2 {
		if !retryPublish(ctx, func() bool { return f.amqp.publish(ctx, "events.notification.update.alert", msg) }) {
			return false
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes++
	return true
}

func (f *soakFleet) addBadBridge(source string, value []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.badBridge[source+" "+string(value)] = true
}

// readLoop has the reader member mark its whole inbox seen every 2 s.
func (f *soakFleet) readLoop(ctx context.Context) {
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	body := []byte(`{"all_notifications":true}`)
	for try := 0; ; try++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if f.post(ctx, f.n.apis[try%len(f.n.apis)], "/v1/messages/seen", f.members["reader"].token, body) == http.StatusNoContent {
			f.mu.Lock()
			f.readRuns++
			f.mu.Unlock()
		}
	}
}

// pushLoop posts a burst of standalone pushes every 10 s: more than the Swrve
// rate allows in a second, so the retriers must share it.
func (f *soakFleet) pushLoop(ctx context.Context) {
	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	for burst := 0; ; burst++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		for i := range 2 * f.cfg.swrveRate {
			p := newTestPush("soak", burst, i)
			b, _ := json.Marshal(p.body())
			// A push whose answer was lost may have been created: it is
			// posted again, and the check counts by what the outbox holds.
			for try := 0; ; try++ {
				if ctx.Err() != nil {
					return
				}
				if f.post(ctx, f.n.apis[try%len(f.n.apis)], "/v1/pushes", pushToken, b) == http.StatusCreated {
					break
				}
				time.Sleep(200 * time.Millisecond) // before the next try
			}
			f.mu.Lock()
			f.pushes++
			f.mu.Unlock()
		}
	}
}

// soakReading is an AMQP message of the fleet's: persistent, so that a
// confirmed one outlives the broker's restart.
func soakReading(body []byte) amqp091.Publishing {
	return amqp091.Publishing{ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: body}
}

// retryPublish calls publish until it reports the message confirmed, a
// broker's restart being what fails it; false once ctx ended.
func retryPublish(ctx context.Context, publish func() bool) bool {
	for !publish() {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond) // before the next try
	}
	return true
}
