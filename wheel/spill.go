package wheel

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// scanBatch bounds the entries of one tick held in memory. A tick with more
// pending entries (a burst) is sorted in runs of scanBatch written to a
// spill file and merged back, reading a few entries of each run at a time.
const (
	scanBatch    = 1 << 15
	spillRecSize = 28
	spillChunk   = 256 // entries read at once per run while merging
	spillName    = "spill.tmp"
)

// tickQueue holds the scanned entries of one tick in due order.
type tickQueue struct {
	dir     string
	tick    int64
	mem     []cand
	head    int
	width   int64 // tick in ms
	count   []int32
	tmp     []cand
	spilled bool
	sp      spill
}

func (q *tickQueue) begin(t int64) {
	q.tick = t
	q.mem = q.mem[:0]
	q.head = 0
	if q.spilled {
		q.sp.reset()
		q.spilled = false
	}
}

func (q *tickQueue) add(c cand) error {
	if len(q.mem) == scanBatch {
		q.sort(q.mem)
		if err := q.sp.writeRun(q.dir, q.mem); err != nil {
			return err
		}
		q.spilled = true
		q.mem = q.mem[:0]
	}
	q.mem = append(q.mem, c)
	return nil
}

func (q *tickQueue) finish() error {
	q.sort(q.mem)
	if !q.spilled {
		return nil
	}
	if err := q.sp.writeRun(q.dir, q.mem); err != nil {
		return err
	}
	q.mem = q.mem[:0]
	return q.sp.startMerge()
}

// sort orders c by due time, partition and offset. The due times of one
// tick take at most tickMs values and the partitions are mostly few and
// small: when every partition is below sortParts, a counting sort by
// partition, then a stable one by due time, leaves only entries of one
// partition due in the same millisecond to put in offset order (rare
// unless there is a burst). Otherwise a counting sort by due time is
// followed by a sort of each run of equal due times.
func (q *tickQueue) sort(c []cand) {
	width := int(q.width)
	if len(c) < 64 || width > 1<<16 {
		slices.SortFunc(c, cmpCand)
		return
	}
	start := q.tick * q.width
	if cap(q.count) < width+1 {
		q.count = make([]int32, width+1)
	}
	if cap(q.tmp) < len(c) {
		q.tmp = make([]cand, len(c))
	}
	tmp := q.tmp[:len(c)]
	if byPartition(c, tmp) {
		q.byDue(tmp, c, start)
		offsetTies(c)
		return
	}
	q.byDue(c, tmp, start)
	count := q.count[:width+1] // count[b]: where the entries due start+b end
	lo := 0
	for b := range width {
		hi := int(count[b])
		if run := tmp[lo:hi]; len(run) > 12 {
			slices.SortFunc(run, cmpCand)
		} else {
			for a := 1; a < len(run); a++ {
				for k := a; k > 0 && cmpCand(run[k], run[k-1]) < 0; k-- {
					run[k], run[k-1] = run[k-1], run[k]
				}
			}
		}
		lo = hi
	}
	copy(c, tmp)
}

// sortParts bounds the partitions sort orders by counting.
const sortParts = 64

// byPartition copies src to dst ordered by partition, keeping the order of
// entries of one partition; false, dst unchanged, if a partition is not in
// [0, sortParts).
func byPartition(src, dst []cand) bool {
	var count [sortParts + 1]int32
	for i := range src {
		p := uint32(src[i].part)
		if p >= sortParts {
			return false
		}
		count[p+1]++
	}
	for i := 1; i <= sortParts; i++ {
		count[i] += count[i-1]
	}
	for i := range src {
		p := src[i].part
		dst[count[p]] = src[i]
		count[p]++
	}
	return true
}

// byDue copies src, entries due in tick q.tick (starting at start), to dst
// ordered by due time, keeping the order of entries due at the same time.
// It leaves in q.count[b] where the entries due at start+b end in dst.
func (q *tickQueue) byDue(src, dst []cand, start int64) {
	count := q.count[:q.width+1]
	clear(count)
	for i := range src {
		count[src[i].due-start+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	for i := range src {
		b := src[i].due - start
		dst[count[b]] = src[i]
		count[b]++
	}
}

// offsetTies puts entries ordered by due time and partition in offset order
// where both are equal. It looks for two neighbours of one due time and
// partition out of order (rare: the test of the common case is one
// predictable branch), then sorts their run: by insertion when short, by
// comparison when long (a burst, whose chains hand offsets in reverse).
func offsetTies(c []cand) {
	for i := 1; i < len(c); i++ {
		if (c[i].due^c[i-1].due)|int64(c[i].part^c[i-1].part) != 0 || c[i].off >= c[i-1].off {
			continue
		}
		lo, hi := i-1, i+1
		for lo > 0 && c[lo-1].due == c[i].due && c[lo-1].part == c[i].part {
			lo--
		}
		for hi < len(c) && c[hi].due == c[i].due && c[hi].part == c[i].part {
			hi++
		}
		if run := c[lo:hi]; len(run) > 12 {
			slices.SortFunc(run, func(a, b cand) int { return cmp.Compare(a.off, b.off) })
		} else {
			for a := 1; a < len(run); a++ {
				x := run[a]
				b := a
				for ; b > 0 && run[b-1].off > x.off; b-- {
					run[b] = run[b-1]
				}
				run[b] = x
			}
		}
		i = hi - 1
	}
}

func (q *tickQueue) has() bool {
	if q.spilled {
		return len(q.sp.heap) > 0
	}
	return q.head < len(q.mem)
}

func (q *tickQueue) peek() (cand, bool) {
	if c := q.first(); c != nil {
		return *c, true
	}
	return cand{}, false
}

// first returns the first entry, nil if none; valid until the next pop.
func (q *tickQueue) first() *cand {
	if q.spilled {
		return q.sp.first()
	}
	if q.head < len(q.mem) {
		return &q.mem[q.head]
	}
	return nil
}

func (q *tickQueue) pop() error {
	if q.spilled {
		return q.sp.pop()
	}
	q.head++
	return nil
}

func (q *tickQueue) close() error {
	q.begin(0)
	return q.sp.close()
}

// spill is an external merge sort of one tick's entries.
type spill struct {
	path string
	f    *os.File
	end  int64
	runs []spillRun
	heap []int // run indices, min-heap on their current entry
	enc  []byte
}

type spillRun struct {
	next, end int64 // file range not yet read
	buf       []cand
	i         int
}

func (s *spill) writeRun(dir string, c []cand) error {
	if s.f == nil {
		s.path = filepath.Join(dir, spillName)
		f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("wheel: spill: %w", err)
		}
		s.f = f
	}
	s.enc = s.enc[:0]
	for _, e := range c {
		var b [spillRecSize]byte
		le.PutUint64(b[0:], uint64(e.due))
		le.PutUint64(b[8:], uint64(e.off))
		le.PutUint32(b[16:], uint32(e.part))
		le.PutUint32(b[20:], e.seg)
		le.PutUint32(b[24:], e.pos)
		s.enc = append(s.enc, b[:]...)
	}
	if _, err := s.f.WriteAt(s.enc, s.end); err != nil {
		return fmt.Errorf("wheel: spill: %w", err)
	}
	n := int64(len(s.enc))
	s.runs = append(s.runs, spillRun{next: s.end, end: s.end + n})
	s.end += n
	if cap(s.enc) > 4<<20 {
		s.enc = nil
	}
	return nil
}

func (s *spill) fill(r *spillRun) error {
	r.buf, r.i = r.buf[:0], 0
	n := min(r.end-r.next, spillChunk*spillRecSize)
	if n == 0 {
		return nil
	}
	if cap(s.enc) < int(n) {
		s.enc = make([]byte, n)
	}
	b := s.enc[:n]
	if _, err := s.f.ReadAt(b, r.next); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("wheel: spill: %w", err)
	}
	r.next += n
	for ; len(b) >= spillRecSize; b = b[spillRecSize:] {
		r.buf = append(r.buf, cand{
			due:  int64(le.Uint64(b[0:])),
			off:  int64(le.Uint64(b[8:])),
			part: int32(le.Uint32(b[16:])),
			seg:  le.Uint32(b[20:]),
			pos:  le.Uint32(b[24:]),
		})
	}
	return nil
}

func (s *spill) less(a, b int) bool {
	ra, rb := &s.runs[a], &s.runs[b]
	return cmpCand(ra.buf[ra.i], rb.buf[rb.i]) < 0
}

func (s *spill) startMerge() error {
	s.heap = s.heap[:0]
	for i := range s.runs {
		if err := s.fill(&s.runs[i]); err != nil {
			return err
		}
		if len(s.runs[i].buf) > 0 {
			s.heap = append(s.heap, i)
		}
	}
	for i := len(s.heap)/2 - 1; i >= 0; i-- {
		s.down(i)
	}
	return nil
}

func (s *spill) down(i int) {
	h := s.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && s.less(h[r], h[l]) {
			m = r
		}
		if !s.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (s *spill) first() *cand {
	if len(s.heap) == 0 {
		return nil
	}
	r := &s.runs[s.heap[0]]
	return &r.buf[r.i]
}

func (s *spill) pop() error {
	if len(s.heap) == 0 {
		return nil
	}
	r := &s.runs[s.heap[0]]
	r.i++
	if r.i == len(r.buf) {
		if err := s.fill(r); err != nil {
			return err
		}
		if len(r.buf) == 0 {
			last := len(s.heap) - 1
			s.heap[0] = s.heap[last]
			s.heap = s.heap[:last]
		}
	}
	if len(s.heap) > 0 {
		s.down(0)
	}
	return nil
}

func (s *spill) reset() {
	s.runs, s.heap, s.end = s.runs[:0], s.heap[:0], 0
	if s.f != nil {
		s.f.Truncate(0)
	}
}

func (s *spill) close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	if e := os.Remove(s.path); e != nil && !errors.Is(e, os.ErrNotExist) {
		err = errors.Join(err, e)
	}
	return err
}
