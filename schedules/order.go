package schedules

import (
	"cmp"
	"slices"
	"sort"
)

// pair is an element of an [order]: a key (a due time, the hash of an id)
// and the ref of the record it belongs to.
type pair struct {
	k int64
	r ref
}

func (a pair) compare(b pair) int {
	if c := cmp.Compare(a.k, b.k); c != 0 {
		return c
	}
	return cmp.Compare(a.r, b.r)
}

// orderBuf is how many pairs an order takes unsorted before it merges
// them into its run: a reader sorts at most that many per walk.
const orderBuf = 4096

// order keeps pairs sorted by key, then ref: a sorted run and a buffer of
// the latest additions (at most orderBuf, unsorted), merged into the run
// when full. A pair whose record left the index stays until the dead ones
// make up a quarter of the order; then one pass drops them all (alive
// tells which are left). 16 bytes a pair, no pointers.
//
// An order is not safe for concurrent use: the Index's lock guards it.
type order struct {
	run  []pair
	buf  []pair
	dead int // pairs counted by removed and still held
}

// add inserts p.
func (o *order) add(p pair, alive func(ref) bool) {
	o.buf = append(o.buf, p)
	if len(o.buf) >= orderBuf {
		o.merge(alive)
	}
}

// removed counts n pairs whose records left the index (alive reports them
// gone from now on) and drops the dead pairs once they are many.
func (o *order) removed(n int, alive func(ref) bool) {
	o.dead += n
	if o.dead >= orderBuf && o.dead > (len(o.run)+len(o.buf))/4 {
		o.merge(alive)
	}
}

// merge sorts the buffer into the run, dropping the dead pairs first when
// there are any.
func (o *order) merge(alive func(ref) bool) {
	if o.dead > 0 {
		keep := func(p pair) bool { return !alive(p.r) }
		o.run = slices.DeleteFunc(o.run, keep)
		o.buf = slices.DeleteFunc(o.buf, keep)
		o.dead = 0
		if c := cap(o.run); c > 1<<16 && c > 4*len(o.run) {
			o.run = append(make([]pair, 0, len(o.run)+len(o.run)/4+orderBuf), o.run...)
		}
	}
	slices.SortFunc(o.buf, pair.compare)
	n, m := len(o.run), len(o.buf)
	o.run = slices.Grow(o.run, m)[:n+m]
	// Merge from the back, in place.
	i, j := n-1, m-1
	for w := n + m - 1; j >= 0; w-- {
		if i >= 0 && o.buf[j].compare(o.run[i]) < 0 {
			o.run[w] = o.run[i]
			i--
		} else {
			o.run[w] = o.buf[j]
			j--
		}
	}
	o.buf = o.buf[:0]
}

// walk calls fn with the pairs whose key is at least from, in order, dead
// ones included, until fn returns false.
func (o *order) walk(from int64, fn func(pair) bool) {
	i := sort.Search(len(o.run), func(i int) bool { return o.run[i].k >= from })
	var b []pair
	for _, p := range o.buf {
		if p.k >= from {
			b = append(b, p)
		}
	}
	slices.SortFunc(b, pair.compare)
	j := 0
	for i < len(o.run) || j < len(b) {
		var p pair
		if j == len(b) || i < len(o.run) && o.run[i].compare(b[j]) < 0 {
			p = o.run[i]
			i++
		} else {
			p = b[j]
			j++
		}
		if !fn(p) {
			return
		}
	}
}

// refs appends to dst the refs of the pairs with key k, dead ones
// included, in ref order.
func (o *order) refs(dst []ref, k int64) []ref {
	start := len(dst)
	for i := sort.Search(len(o.run), func(i int) bool { return o.run[i].k >= k }); i < len(o.run) && o.run[i].k == k; i++ {
		dst = append(dst, o.run[i].r)
	}
	for _, p := range o.buf {
		if p.k == k {
			dst = append(dst, p.r)
		}
	}
	slices.Sort(dst[start:])
	return dst
}
