package wheel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// A checkpoint is the wheel's state at a log position P, so that recovery
// only replays the log after P. Two files, checkpoint.0 and checkpoint.1,
// are written in turn; a torn write leaves the other one valid.
//
//	0 magic "KDWHLCKP"  8 version u32  12 tick ms u32  16 slots u32
//	20 sealed u32  24 generation u64  32 P segment u32  36 P offset u32
//	40 restart tick i64  48 last now i64  56 active min due i64
//	64 active max due i64  72 active entries i64  80 ranges u32  84 parts u32
//	88 active slot heads: slots x u32
//	   spans: slots x {min i64, max i64}
//	   active ranges: ranges x {partition i32, min i64, max i64}
//	   sealed segments: sealed x {id u32, size u32}
//	   parts x {partition i32, epoch u32, handled i64, high i64, chunks u32,
//	            chunks x {index i64, 64 x u64}}
//	   crc32c u32 of everything before
const (
	ckptMagic      = "KDWHLCKP"
	ckptHeaderSize = 88
	partRecSize    = 28
	chunkRecSize   = 8 + 8*chunkWords
)

func ckptPath(dir string, i uint64) string {
	return filepath.Join(dir, fmt.Sprintf("checkpoint.%d", i%2))
}

type checkpoint struct {
	gen        uint64
	g          geometry
	seg        uint32
	off        uint32
	restart    int64
	lastNow    int64
	minDue     int64
	maxDue     int64
	entries    int64
	heads      []uint32
	sum        []span
	ranges     []partRange
	sealed     map[uint32]int64 // id -> size of every sealed segment
	parts      []*partState
	pendingSum int64
}

// encodeCheckpoint appends the checkpoint of the wheel's current state at
// the end of the active segment (all buffered records written) to b. The
// segments in omit are about to be deleted.
func (w *Wheel) encodeCheckpoint(b []byte, omit []*segment) []byte {
	restart, ext := w.restartState()
	a := w.active
	var ranges []partRange
	for _, p := range w.parts {
		if p.segID == a.id {
			ranges = append(ranges, partRange{p.id, p.segMin, p.segMax})
		}
	}
	var sealed []*segment
	for _, s := range w.segs[:len(w.segs)-1] {
		if !slices.Contains(omit, s) {
			sealed = append(sealed, s)
		}
	}
	n := w.g.nslots
	b = b[:0]
	b = grow(b, ckptHeaderSize+4*n+16*n+rangeSize*len(ranges)+8*len(sealed))
	copy(b, ckptMagic)
	le.PutUint32(b[8:], formatVersion)
	le.PutUint32(b[12:], uint32(w.g.tick))
	le.PutUint32(b[16:], uint32(n))
	le.PutUint32(b[20:], uint32(len(sealed)))
	le.PutUint64(b[24:], w.ckptGen+1)
	le.PutUint32(b[32:], a.id)
	le.PutUint32(b[36:], uint32(a.size))
	le.PutUint64(b[40:], uint64(restart))
	le.PutUint64(b[48:], uint64(w.lastNow))
	le.PutUint64(b[56:], uint64(a.minDue))
	le.PutUint64(b[64:], uint64(a.maxDue))
	le.PutUint64(b[72:], uint64(a.entries))
	le.PutUint32(b[80:], uint32(len(ranges)))
	le.PutUint32(b[84:], uint32(len(w.parts)))
	p := b[ckptHeaderSize:]
	for _, h := range w.heads {
		le.PutUint32(p, h)
		p = p[4:]
	}
	for i, sp := range w.sum {
		if e, ok := ext[i]; ok {
			sp.extend(e.min)
			sp.extend(e.max)
		}
		le.PutUint64(p, uint64(sp.min))
		le.PutUint64(p[8:], uint64(sp.max))
		p = p[16:]
	}
	for _, r := range ranges {
		le.PutUint32(p, uint32(r.part))
		le.PutUint64(p[4:], uint64(r.min))
		le.PutUint64(p[12:], uint64(r.max))
		p = p[rangeSize:]
	}
	for _, s := range sealed {
		le.PutUint32(p, s.id)
		le.PutUint32(p[4:], uint32(s.size))
		p = p[8:]
	}
	for _, ps := range w.parts {
		off := len(b)
		b = grow(b, partRecSize+chunkRecSize*len(ps.pending.keys))
		q := b[off:]
		le.PutUint32(q, uint32(ps.id))
		le.PutUint32(q[4:], ps.epoch)
		le.PutUint64(q[8:], uint64(ps.handled))
		le.PutUint64(q[16:], uint64(ps.high))
		le.PutUint32(q[24:], uint32(len(ps.pending.keys)))
		q = q[partRecSize:]
		for i := range ps.pending.keys {
			le.PutUint64(q, uint64(ps.pending.keys[i].idx))
			for j, word := range &ps.pending.words[i] {
				le.PutUint64(q[8+8*j:], word)
			}
			q = q[chunkRecSize:]
		}
	}
	off := len(b)
	b = grow(b, 4)
	le.PutUint32(b[off:], checksum(b[:off]))
	return b
}

var errBadCheckpoint = errors.New("wheel: bad checkpoint")

// decodeCheckpoint checks and decodes a checkpoint file.
func decodeCheckpoint(b []byte) (*checkpoint, error) {
	bad := func(what string) (*checkpoint, error) {
		return nil, fmt.Errorf("%w: %s", errBadCheckpoint, what)
	}
	if len(b) < ckptHeaderSize+4 {
		return bad("short file")
	}
	if string(b[:8]) != ckptMagic {
		return bad("not a wheel checkpoint")
	}
	n := len(b)
	if le.Uint32(b[n-4:]) != checksum(b[:n-4]) {
		return bad("checksum (torn write?)")
	}
	if v := le.Uint32(b[8:]); v != formatVersion {
		return bad(fmt.Sprintf("format version %d, want %d", v, formatVersion))
	}
	c := &checkpoint{
		g:       geometry{tick: int64(le.Uint32(b[12:])), nslots: int(le.Uint32(b[16:]))},
		gen:     le.Uint64(b[24:]),
		seg:     le.Uint32(b[32:]),
		off:     le.Uint32(b[36:]),
		restart: int64(le.Uint64(b[40:])),
		lastNow: int64(le.Uint64(b[48:])),
		minDue:  int64(le.Uint64(b[56:])),
		maxDue:  int64(le.Uint64(b[64:])),
		entries: int64(le.Uint64(b[72:])),
	}
	nr, np, ns := int(le.Uint32(b[80:])), int(le.Uint32(b[84:])), int(le.Uint32(b[20:]))
	if c.g.tick <= 0 || c.g.nslots < 2 || c.g.nslots > maxSlots || c.off < segHeaderSize || c.seg == 0 {
		return bad("header values")
	}
	body := b[ckptHeaderSize : n-4]
	need := 4*c.g.nslots + 16*c.g.nslots
	if len(body) < need || (len(body)-need)/rangeSize < nr || (len(body)-need-rangeSize*nr)/8 < ns {
		return bad("size")
	}
	c.heads = make([]uint32, c.g.nslots)
	for i := range c.heads {
		c.heads[i] = le.Uint32(body)
		if h := c.heads[i]; h != 0 && (h < segHeaderSize || h >= c.off) {
			return bad("slot head beyond checkpoint position")
		}
		body = body[4:]
	}
	c.sum = make([]span, c.g.nslots)
	for i := range c.sum {
		c.sum[i] = span{int64(le.Uint64(body)), int64(le.Uint64(body[8:]))}
		body = body[16:]
	}
	c.ranges = make([]partRange, nr)
	for i := range c.ranges {
		c.ranges[i] = partRange{int32(le.Uint32(body)), int64(le.Uint64(body[4:])), int64(le.Uint64(body[12:]))}
		body = body[rangeSize:]
	}
	c.sealed = make(map[uint32]int64, ns)
	for range ns {
		id, size := le.Uint32(body), int64(le.Uint32(body[4:]))
		if id >= c.seg || size < segHeaderSize {
			return bad("sealed segment list")
		}
		c.sealed[id] = size
		body = body[8:]
	}
	seen := make(map[int32]bool, min(np, 1<<16))
	for range np {
		if len(body) < partRecSize {
			return bad("partition records")
		}
		ps := newPartState(int32(le.Uint32(body)))
		ps.epoch = le.Uint32(body[4:])
		ps.handled = int64(le.Uint64(body[8:]))
		ps.durable = ps.handled
		ps.high = int64(le.Uint64(body[16:]))
		nc := int(le.Uint32(body[24:]))
		body = body[partRecSize:]
		if ps.id < 0 || seen[ps.id] || nc < 0 || len(body)/chunkRecSize < nc {
			return bad("partition record")
		}
		seen[ps.id] = true
		ps.pending.keys = make([]chunkKey, 0, nc)
		ps.pending.words = make([]bitChunk, 0, nc)
		for range nc {
			idx := int64(le.Uint64(body))
			var ws bitChunk
			or := uint64(0)
			for j := range ws {
				ws[j] = le.Uint64(body[8+8*j:])
				or |= ws[j]
			}
			body = body[chunkRecSize:]
			if or == 0 || idx < 0 || idx > math.MaxInt64>>chunkShift {
				return bad("empty or negative chunk")
			}
			if k := len(ps.pending.keys); k > 0 && ps.pending.keys[k-1].idx >= idx {
				return bad("chunks out of order")
			}
			ps.pending.appendChunk(idx, &ws)
		}
		c.pendingSum += ps.pending.count
		c.parts = append(c.parts, ps)
	}
	if len(body) != 0 {
		return bad("trailing bytes")
	}
	return c, nil
}

// writeCheckpoint writes the checkpoint of the current state, whose records
// must all be written (and synced, unless the policy is SyncNone).
func (w *Wheel) writeCheckpoint(omit ...*segment) error {
	w.ckptBuf = w.encodeCheckpoint(w.ckptBuf, omit)
	gen := w.ckptGen + 1
	path := ckptPath(w.dir, gen)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("wheel: checkpoint: %w", err)
	}
	_, err = f.Write(w.ckptBuf)
	if err == nil && w.opt.Sync != SyncNone {
		err = fsync(f)
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("wheel: checkpoint %s: %w", path, err)
	}
	if len(w.ckptBuf) > 4<<20 {
		w.ckptBuf = nil // do not keep a large buffer around
	}
	w.ckptGen = gen
	w.ckptSeg = w.active.id
	w.ckptSegs[gen%2] = w.active.id
	w.sinceCkpt = 0
	return nil
}
