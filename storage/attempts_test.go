package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// TestFinishDeliveriesLogsAttempts: an outcome and its attempt row are written
// together; an outcome fenced off still logs its attempt (recorded false); an
// attempt not sent gives its number back and logs nothing; the log is copied to
// ClickHouse once, and a failed copy leaves it to copy again.
func TestFinishDeliveriesLogsAttempts(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	f := &outboxFixture{Fleet: &storagetest.Fleet{Stores: stores, Ctx: context.Background()}, pg: stores.Postgres,
		reg: stores.Registry, ctx: context.Background()}
	if _, err := f.reg.CreateSensor(f.ctx, registry.Sensor{ID: "s1", Address: "1 Street"}); err != nil {
		t.Fatal(err)
	}
	c := f.Client(t, registry.Client{Name: "c"}, "s1")
	f.create(t, stateChanged("e1", "s1", 1, outboxT0))
	d := f.claim(t, later(), 10)[0]
	if d.Attempts != 1 {
		t.Fatalf("claimed as attempt %d", d.Attempts)
	}
	ctx := f.ctx

	// Not sent: attempt 1 is given back, nothing logged.
	done, err := f.pg.FinishDeliveries(ctx, []storage.DeliveryFinish{{ID: d.ID, Attempt: 1, State: storage.DeliveryRetry,
		NextAttemptAt: outboxT0, Error: "store down", ErrorType: "STORE", NotSent: true}})
	if err != nil || len(done) != 1 || done[0].State != storage.DeliveryRetry {
		t.Fatalf("not-sent finish = %+v, %v", done, err)
	}
	if got := f.get(t, d.ID); got.Attempts != 0 {
		t.Fatalf("after a finish not sent: %d attempts, want 0", got.Attempts)
	}
	// Sent as attempt 1 (again), with its details.
	d = f.claim(t, later(), 10)[0]
	at := outboxT0.Add(time.Minute)
	done, err = f.pg.FinishDeliveries(ctx, []storage.DeliveryFinish{{ID: d.ID, Attempt: d.Attempts, State: storage.DeliveryRetry,
		NextAttemptAt: outboxT0, Error: "503", HTTPStatus: 503, ErrorType: "HTTP_STATUS", AnswerCode: 7, AnswerMessage: "busy",
		Duration: 1500 * time.Millisecond, At: at}})
	if err != nil || len(done) != 1 {
		t.Fatalf("finish = %+v, %v", done, err)
	}
	// Attempt 2 claimed, then its late outcome fenced off by a reset.
	d = f.claim(t, later(), 10)[0]
	if _, err := f.pg.RequeueExpiredLeases(ctx, later().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again := f.claim(t, later().Add(25*time.Hour), 10); len(again) != 1 || again[0].Attempts != 3 {
		t.Fatalf("reclaimed %+v, want attempt 3", again)
	}
	done, err = f.pg.FinishDeliveries(ctx, []storage.DeliveryFinish{{ID: d.ID, Attempt: 2, State: storage.DeliverySent,
		HTTPStatus: 200, At: at.Add(time.Minute)}})
	if err != nil || len(done) != 0 {
		t.Fatalf("fenced finish = %+v, %v; want nothing recorded", done, err)
	}

	log, err := f.pg.DeliveryAttempts(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 {
		t.Fatalf("attempt log = %+v, want 3 rows (attempt 1, attempt 2's lease expiry, its fenced outcome)", log)
	}
	a := log[0]
	if a.Attempt != 1 || a.Status != storage.DeliveryRetry || !a.Recorded || a.HTTPStatus != 503 || a.ErrorType != "HTTP_STATUS" ||
		a.AnswerCode != 7 || a.AnswerMessage != "busy" || a.Duration != 1500*time.Millisecond || !a.At.Equal(at) ||
		a.ClientID != c.ID || a.SensorID != "s1" || a.EventID != "e1" || a.Channel != storage.ChannelWebhook {
		t.Errorf("attempt 1 = %+v", a)
	}
	if b := log[1]; b.Attempt != 2 || b.Status != storage.DeliveryPending || !b.Recorded ||
		b.ErrorType != storage.ErrorTypeLeaseExpired || b.EventID != "e1" || b.ClientID != c.ID {
		t.Errorf("attempt 2 at its lease's expiry = %+v, want PENDING, %s", b, storage.ErrorTypeLeaseExpired)
	}
	if b := log[2]; b.Attempt != 2 || b.Status != storage.DeliverySent || b.Recorded || b.HTTPStatus != 200 {
		t.Errorf("fenced attempt 2 = %+v, want SENT, not recorded", b)
	}

	// The copy: a failure leaves the rows; a success copies each once.
	boom := errors.New("clickhouse down")
	if _, err := f.pg.CopyDeliveryAttempts(ctx, 10, func(context.Context, []storage.DeliveryAttempt) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed copy: %v", err)
	}
	for range 2 {
		if _, err := f.pg.CopyDeliveryAttempts(ctx, 10, stores.ClickHouse.InsertDeliveryAttempts); err != nil {
			t.Fatal(err)
		}
	}
	copied, err := stores.ClickHouse.DeliveryAttempts(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	// ClickHouse orders by time: the expiry was logged at the requeue's clock.
	ids := map[int64]int{}
	for _, a := range copied {
		ids[a.ID]++
	}
	if len(copied) != 3 || ids[log[0].ID] != 1 || ids[log[1].ID] != 1 || ids[log[2].ID] != 1 {
		t.Fatalf("ClickHouse has %+v, want the 3 rows once", copied)
	}
	if n, err := f.pg.CopyDeliveryAttempts(ctx, 10, stores.ClickHouse.InsertDeliveryAttempts); n != 0 || err != nil {
		t.Fatalf("copy after catching up = %d, %v; want nothing", n, err)
	}
}
