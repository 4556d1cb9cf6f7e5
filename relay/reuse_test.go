package relay

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// TestReuseKeepsRecords: the relay reuses the items and wheelFires of
// settled records (itemPool) while others are in flight, retried,
// dead-lettered or firing a series; every record still arrives with its
// own key, value, headers, due time and source. Many small batches
// through the wheel, the first produce requests failed (retries), a
// missing target (retries, then dead letters made from fired entries)
// and series (a firing's next occurrence shares its decoded record).
func TestReuseKeepsRecords(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	for _, mode := range []string{AtLeastOnce, ExactlyOnce} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, map[string]string{"KDELAY_TARGET_MISSING_TIMEOUT": "1s"}, "orders")
			h.readCommitted = true
			var mu sync.Mutex
			failProduce := 0
			h.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.c.KeepControl()
				pr := req.(*kmsg.ProduceRequest)
				mu.Lock()
				defer mu.Unlock()
				if failProduce == 0 { // set once the test's own records are in: the relay's produces fail
					return nil, nil, false
				}
				failProduce--
				return produceError(pr, notLeader), nil, true
			})
			rr := h.start(func(c *config.Config) { c.Delivery = mode }, func(o *Options) { o.MaxBatch = 64 })
			rr.waitReady(t)

			base := time.Now().Add(1500 * time.Millisecond)
			tab := h.cfg.Table()
			var keys, lost []string
			var wg sync.WaitGroup
			produce := func(r *kgo.Record) {
				wg.Add(1)
				h.prod.Produce(context.Background(), r, func(r *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						t.Error(err)
					}
				})
			}
			for i := range 1200 {
				k := "r-" + strconv.Itoa(i)
				target := "orders"
				if i%60 == 0 && mode == AtLeastOnce {
					// Missing: retried, then dead-lettered (exactly
					// once, it would abort every transaction meanwhile).
					target = "gone"
					lost = append(lost, k)
				} else {
					keys = append(keys, k)
				}
				d := levels.Delay{Target: target, At: base.Add(time.Duration(i%300) * time.Millisecond)}
				if i%3 == 0 {
					d.ID = "id-" + k
				}
				r := &kgo.Record{Key: []byte(k), Value: []byte("v-" + k + strings.Repeat("x", i%97)),
					Headers: []kgo.RecordHeader{{Key: "own", Value: []byte(k)}}}
				if err := tab.Stamp(r, h.cfg.Topic, d, time.Now()); err != nil {
					t.Fatal(err)
				}
				s, err := tab.Parse(r.Headers, r.Timestamp)
				if err != nil {
					t.Fatal(err)
				}
				h.mu.Lock()
				h.sent[k] = sent{key: k, due: s.Due, delay: s.Delay, partition: r.Partition}
				h.mu.Unlock()
				produce(r)
			}
			wg.Wait()
			start := base.Add(time.Second).Truncate(time.Millisecond)
			for i := range 3 {
				h.sendSeries("s-"+strconv.Itoa(i), time.Now, 2500*time.Millisecond, levels.HeaderID, "s-"+strconv.Itoa(i),
					levels.HeaderTarget, "orders", levels.HeaderEvery, "1s", levels.HeaderDeliverAt, ms(start), levels.HeaderCount, "3")
			}
			mu.Lock()
			failProduce = 4
			mu.Unlock()

			got := h.collect(60*time.Second, func(got map[string][]received) bool {
				for i := range 3 { // its last occurrence (a late one catches up)
					if !slices.ContainsFunc(got["s-"+strconv.Itoa(i)], func(rc received) bool { return rc.headers[levels.HeaderOccurrence] == "3" }) {
						return false
					}
				}
				return allKeys(append(keys, lost...)...)(got)
			}, "orders", h.cfg.DLQTopic)
			h.report(got, keys, len(keys))
			value := func(k string) string {
				i, _ := strconv.Atoi(strings.TrimPrefix(k, "r-"))
				return "v-" + k + strings.Repeat("x", i%97)
			}
			for _, k := range append(keys, lost...) {
				h.mu.Lock()
				s := h.sent[k]
				h.mu.Unlock()
				for _, rc := range got[k] {
					if rc.value != value(k) || rc.headers["own"] != k {
						t.Errorf("%s: value %q, own header %q: not its own", k, rc.value, rc.headers["own"])
					}
					if !strings.HasPrefix(rc.source, h.cfg.Topic+"/"+strconv.Itoa(int(s.partition))+"/") {
						t.Errorf("%s: source %q, sent to partition %d", k, rc.source, s.partition)
					}
					want := "orders"
					if slices.Contains(lost, k) {
						want = h.cfg.DLQTopic
					}
					if rc.topic != want {
						t.Errorf("%s: arrived on %s, want %s", k, rc.topic, want)
					}
				}
			}
			for i := range 3 {
				k := "s-" + strconv.Itoa(i)
				for _, rc := range got[k] {
					if rc.value != "v-"+k || rc.headers["own"] != k {
						t.Errorf("%s: value %q, own header %q: not its own", k, rc.value, rc.headers["own"])
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if failProduce != 0 {
				t.Errorf("%d injected produce failures left unused", failProduce)
			}
		})
	}
}
