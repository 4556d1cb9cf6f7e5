package relay

import "time"

// slowProduce is how long a produce may be in flight before the relay
// reports itself retrying (not ready).
const slowProduce = 5 * time.Second

// updateGauges sets the relay's gauges and its health from what the loop
// holds. The loop calls it after every iteration, under mu: it allocates
// nothing and hashes no label values (the series are resolved once).
func (r *Relay) updateGauges(now time.Time) {
	paused, retrying, deadRetrying, due := 0, 0, 0, false
	nlev := r.pol.table.Levels()
	if cap(r.gaugeNext) < nlev+1 {
		r.gaugeNext, r.gaugeLag = make([]time.Time, nlev+1), make([]int64, nlev+1)
	}
	next, lag := r.gaugeNext[:nlev+1], r.gaugeLag[:nlev+1]
	clear(next)
	clear(lag)
	for _, ps := range r.parts {
		if ps.hwm >= 0 && ps.level <= nlev {
			lag[ps.level] += max(0, ps.hwm-max(ps.led.commit, 0))
		}
		if ps.paused {
			paused++
		}
		retrying += len(ps.retries)
		for _, it := range ps.retries {
			if it.kind == kDead {
				deadRetrying++
			}
		}
		for _, it := range ps.flight {
			// A produce franz-go keeps retrying (NOT_ENOUGH_REPLICAS
			// below min ISR, a leader away) is not ours to retry yet,
			// but the relay is not making progress: say so.
			if !it.finished.Load() && now.Sub(it.sentAt) > slowProduce {
				retrying++
			}
		}
		if (len(ps.queue) > 0 && ps.waitFor.IsZero()) || len(ps.flight) > 0 {
			due = true
		}
		if !ps.waitFor.IsZero() && ps.level <= nlev {
			if t := next[ps.level]; t.IsZero() || ps.waitFor.Before(t) {
				next[ps.level] = ps.waitFor
			}
		}
	}
	pending := int64(0)
	if r.wheel != nil {
		pending = r.wheel.Pending()
		if ms, ok := r.wheel.NextExpiry(); ok {
			due = due || ms <= now.UnixMilli()
			r.m.wheelNext.Set(float64(ms) / 1000)
		} else {
			r.m.wheelNext.Set(0)
		}
	}
	r.m.paused.Set(float64(paused))
	r.m.assigned.Set(float64(len(r.parts)))
	r.m.wheelPending.Set(float64(pending))
	r.countCompactions()
	r.m.retrying.Set(float64(retrying))
	for level := 1; level <= nlev; level++ {
		v := 0.0
		if t := next[level]; !t.IsZero() {
			v = float64(t.UnixMilli()) / 1000
		}
		ls := r.m.level(level)
		ls.nextDue.Set(v)
		ls.lag.Set(float64(lag[level]))
	}
	r.health.update(now, status{
		due:          due || retrying > 0 || r.suspect,
		retrying:     retrying > 0 || r.suspect, // holding its forwards until membership is confirmed
		deadRetrying: deadRetrying > 0,
		noWheel:      r.wheel == nil,
	})
	for i, why := range stallReasons {
		r.m.stalledBy[i].Set(boolFloat(r.health.has(why)))
	}
}

// countCompactions adds the wheel's compactions installed since the last
// call to kdelay_wheel_compactions_total and the entries they copied to
// kdelay_wheel_compacted_entries_total. r.mu is held.
func (r *Relay) countCompactions() {
	if r.wheel == nil {
		return
	}
	segs, entries := r.wheel.Compacted()
	if segs > r.compactSeen {
		r.m.compactions.Add(float64(segs - r.compactSeen))
		r.m.compactedEntries.Add(float64(entries - r.compactEntriesSeen))
	}
	r.compactSeen, r.compactEntriesSeen = segs, entries
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
