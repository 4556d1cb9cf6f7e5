package relay

// resyncPartition forgets the partition's local state and seeks it back to
// its committed offset.
func (r *Relay) resyncPartition(ps *partState) {
	if r.wheel != nil {
		if err := r.wheel.Drop(ps.p); err != nil {
			r.wheelFailed("drop", err)
		}
	}
	ps.clearQueue()
	ps.retries, ps.flight = nil, nil // what lands late is read again
	ps.next = ps.led.resync()
	r.resync[ps.p] = ps.next
}

// finish records what is done: the handled watermark advanced by this
// iteration's queue heads (b), the outcomes that are in (of this iteration
// or an earlier one) settled, wheel entries done, the wheel flushed.
// Records in flight or set aside for a retry hold back their partition's
// commit and its persisted watermark. The items settled are given back to
// the pool (giveBack): neither b nor anything taken from the partitions
// may be used once finish returns.
//
// flush says whether to flush the wheel; exactly-once mode flushes only
// after its transaction committed.
func (r *Relay) finish(b []*item, flush bool) {
	if r.fin.touched == nil {
		r.fin.touched = make(map[int32]int64)
	}
	touched := r.fin.touched // partition -> highest handled offset of the batch (-1: none)
	clear(touched)
	in := r.fin.in[:0]
	for _, it := range b {
		h, ok := touched[it.part]
		if !ok {
			h = -1
		}
		if it.fromQueue {
			h = max(h, it.offset)
		}
		touched[it.part] = h
		if it.out == nil {
			in = append(in, it) // into the wheel: nothing to produce
		}
	}
	for p, ps := range r.parts {
		n := len(in)
		if in = ps.takeFinished(in); len(in) > n {
			if _, ok := touched[p]; !ok {
				touched[p] = -1
			}
		}
	}
	settled := r.settle(in, r.now())
	if len(settled) > 0 {
		r.progress()
	}
	for _, it := range settled {
		if ps := r.parts[it.part]; ps != nil {
			ps.led.settle()
		}
		switch it.kind {
		case kForward, kFire:
			ls := r.m.level(it.level)
			if it.kind == kFire {
				r.wheelDone(it)
				ls.nWheel++
			} else {
				ls.nDirect++
			}
			ls.lateness.Observe(it.ackedAt.Sub(it.due).Seconds())
			ls.sendLateness.Observe(float64(it.handedNs-it.due.UnixNano()) / 1e9)
		case kCascade:
			r.m.cascadedAt(it.level).Inc()
			if it.pair != nil {
				r.nextSettled(it) // a series' next occurrence (recur.go)
			}
		case kSkip:
			if !it.fromQueue {
				r.wheelDone(it) // a duplicate series firing from the wheel (recur.go)
			}
		case kDead:
			r.m.deadLettered.WithLabelValues(levelLabel(it.level), it.reason).Inc()
			if !it.fromQueue {
				r.wheelDone(it)
			}
		case kCancelled:
			r.cancelDone(it)
		}
		r.giveBack(it) // the last use of it
	}
	if len(b) == 0 && len(settled) == 0 {
		r.pool.trim() // a quiet iteration
	}
	clear(in) // settled shares its storage
	r.fin.in = in[:0]
	for p, h := range touched {
		ps := r.parts[p]
		if ps == nil {
			continue
		}
		ps.led.handle(h)
		if r.wheel != nil && ps.led.handled >= 0 {
			// The persisted watermark stays below a record in flight or
			// being retried: a restart must read it again.
			r.wheel.SetHandled(p, ps.led.persisted(ps.lowestUnsettled(true)))
		}
	}
	if flush && r.wheel != nil {
		// An fsync here (SyncBatch: exactly once, which flushes only
		// after a commit or an abort; SyncInterval) runs under r.mu: the
		// wheel is r.mu's.
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
}

// finishScratch is finish's storage, kept from one call to the next
// (r.mu held) so that finishing a batch allocates nothing of its own.
type finishScratch struct {
	touched map[int32]int64
	in      []*item
}

func (r *Relay) wheelDone(it *item) {
	if !it.pairDone() || r.wheel == nil {
		return // reset: the partition is re-read from its commit
	}
	if err := r.wheel.Done(it.part, it.offset); err != nil {
		r.wheelFailed("done", err)
	}
}
