package relay

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
)

// TestUpdatePausesReadAhead: a partition whose head waits within the
// read-ahead (holding) keeps fetching until the queues of all holding
// partitions reach ReadAheadBytes, then pauses, and resumes once they hold
// less again; a head waiting outside it pauses its partition at once.
func TestUpdatePausesReadAhead(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Value: bytes.Repeat([]byte{'v'}, 100)}
	per := recordBytes(rec) + heldRecordOverhead
	r := &Relay{cl: cl, cfg: config.Config{Topic: "delays"}, maxBatch: 4096, maxBytes: 8 << 20, aheadMax: 10 * per,
		parts: map[int32]*partState{}}
	later := time.Unix(100, 0)
	set := func(p int32, n int, waitFor time.Time, holding bool) {
		ps := &partState{p: p, waitFor: waitFor, holding: holding, paused: r.parts[p] != nil && r.parts[p].paused}
		for range n {
			ps.queue = append(ps.queue, rec)
			ps.bytes += recordBytes(rec)
		}
		r.parts[p] = ps
	}
	check := func(step string, want ...int32) {
		t.Helper()
		r.updatePauses()
		var got []int32
		for p, ps := range r.parts {
			if ps.paused {
				got = append(got, p)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: paused %v, want %v", step, got, want)
		}
		if fetching := cl.PauseFetchPartitions(nil)["delays"]; !slices.Equal(slices.Sorted(slices.Values(fetching)), want) {
			t.Errorf("%s: the client pauses %v, want %v", step, fetching, want)
		}
	}
	set(0, 4, later, true)
	set(1, 5, later, true)
	set(2, 1, later, false) // waits outside the read-ahead
	set(3, 1, time.Time{}, false)
	check("9 of 10 held", 2)
	set(1, 6, later, true)
	check("10 of 10 held", 0, 1, 2)
	set(0, 3, later, true)
	check("9 of 10 held again", 2)
	set(1, 6, time.Time{}, false) // its level time came: drained as any queue
	check("3 held", 2)
}
