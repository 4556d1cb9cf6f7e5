package relay

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kdelay/kdelay/levels"
)

// doneSetRun: one record waiting 3 s in the wheel (4 s delay, level 1) holds partition 0's
// commit at offset 0 while 60 records behind it are delivered; the relay
// stops cleanly and its data directory is lost. The next relay (or the
// next owner after a rebalance) knows from the commit metadata what is
// done above the commit. It returns the duplicates seen.
func doneSetRun(t *testing.T, limit int) (dups int, overflow float64) {
	h := newHarness(t, nil, "orders")
	rr := h.start(nil, func(o *Options) { o.MetadataLimit = limit })
	rr.waitReady(t)
	h.sendRaw("long", 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "4s")
	keys := keysOf("short", 60)
	for _, k := range keys {
		h.sendRaw(k, 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "100ms")
	}
	h.collect(20*time.Second, allKeys(keys...), "orders")
	// The commit with the done set of the 60 (or, with a tiny limit, the
	// one that left it out) comes at most commitEvery after the last of
	// them landed: wait until the group has it (at most 30s).
	var md string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		offs, err := h.adm.FetchOffsets(context.Background(), h.cfg.Group)
		if err != nil {
			continue
		}
		if o, ok := offs.Lookup(h.cfg.Topic, 0); ok && o.At == 0 {
			md = o.Metadata
			if (limit < 100 && testutil.ToFloat64(rr.r.m.metaOverflow) > 0) || strings.Contains(md, metaDone) {
				break
			}
		}
	}
	if !strings.HasPrefix(md, metaPrefix) || (limit >= 100 && !strings.Contains(md, metaDone)) {
		t.Fatalf("partition 0's commit metadata never carried the done set: %q", md)
	}
	overflow = testutil.ToFloat64(rr.r.m.metaOverflow)
	rr.stop(t)
	if err := os.RemoveAll(h.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	h.start(nil)
	all := append(keys, "long")
	got := h.collect(30*time.Second, allKeys(all...), "orders")
	h.report(got, all, len(all))
	for _, k := range all {
		dups += max(0, len(got[k])-1)
	}
	return dups, overflow
}

// TestDoneSetTravels (issue 12.1): what was done above the committed
// offset travels in the commit metadata, so a relay without the data
// directory delivers none of it again.
func TestDoneSetTravels(t *testing.T) {
	dups, overflow := doneSetRun(t, DefaultMetadataLimit)
	if dups != 0 || overflow != 0 {
		t.Errorf("with the done set: %d duplicates, %v overflows; want 0 and 0", dups, overflow)
	}
}

// TestDoneSetOverflow: when the done set does not fit the metadata limit
// it is left out and counted; the records are delivered again, none lost.
func TestDoneSetOverflow(t *testing.T) {
	dups, overflow := doneSetRun(t, len(metaPrefix)+len("1s 2s 4s 8s / 1")+len(metaDone)+2)
	if overflow == 0 || dups == 0 {
		t.Errorf("with a tiny metadata limit: %d duplicates, %v overflows; want both > 0", dups, overflow)
	}
	t.Logf("tiny limit: %d duplicates, %v overflows", dups, overflow)
}
