package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// TestProducerReadyBeforeDue: on a relay that has produced nothing yet, a
// record coming due soon makes the relay load its producer ID before the
// due time (warmUp), so the record's own produce does not wait for it.
func TestProducerReadyBeforeDue(t *testing.T) {
	h := newHarness(t, nil, "orders")
	// The harness's producer loads its own ID first: any InitProducerID
	// from here on is the relay's.
	if _, _, err := h.prod.ProducerID(context.Background()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var loaded time.Time // when the relay's InitProducerID reached the broker
	h.c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		mu.Lock()
		if loaded.IsZero() {
			loaded = time.Now()
		}
		mu.Unlock()
		return nil, nil, false
	})
	firstLoad := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return loaded
	}
	rr := h.start(nil)
	rr.waitReady(t)
	if at := firstLoad(); !at.IsZero() {
		t.Fatalf("producer ID loaded at start (%s), before any due work: nothing left to show", at.Format(time.TimeOnly+".000"))
	}
	s := h.send("warm", levels.Delay{Target: "orders", Delay: time.Second})
	waitFor(t, func() bool { return !firstLoad().IsZero() })
	if at := firstLoad(); !at.Before(s.due) {
		t.Errorf("producer ID loaded %s after the due time: the record's produce waited for it", at.Sub(s.due))
	} else {
		t.Logf("producer ID loaded %s before the due time", s.due.Sub(at))
	}
	got := h.collect(30*time.Second, allKeys("warm"), "orders")
	h.report(got, []string{"warm"}, 0)
}
