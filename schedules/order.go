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
// tells which). 16 bytes a pair, no pointers, in chunks of equal size.
//
// An order is not safe for concurrent use: the Index's lock guards it.
type order struct {
	run  pairs
	buf  []pair
	dead int // pairs counted by removed and still held
}

// add inserts p.
func (o *order) add(p pair, alive func(ref) bool) {
	if o.buf == nil {
		o.buf = make([]pair, 0, orderBuf)
	}
	o.buf = append(o.buf, p)
	if len(o.buf) >= orderBuf {
		o.merge(alive)
	}
}

// removed counts n pairs whose records left the index (alive reports them
// gone from now on) and drops the dead pairs once they are many.
func (o *order) removed(n int, alive func(ref) bool) {
	o.dead += n
	if o.dead >= orderBuf && o.dead > (o.run.n+len(o.buf))/4 {
		o.merge(alive)
	}
}

// merge sorts the buffer into the run, dropping the dead pairs first when
// there are any.
func (o *order) merge(alive func(ref) bool) {
	if o.dead > 0 {
		w := 0
		for i := range o.run.n {
			if p := *o.run.at(i); alive(p.r) {
				*o.run.at(w) = p
				w++
			}
		}
		o.run.resize(w)
		o.buf = slices.DeleteFunc(o.buf, func(p pair) bool { return !alive(p.r) })
		o.dead = 0
	}
	slices.SortFunc(o.buf, pair.compare)
	n, m := o.run.n, len(o.buf)
	o.run.resize(n + m)
	// Merge from the back, in place.
	i, j := n-1, m-1
	for w := n + m - 1; j >= 0; w-- {
		if i >= 0 && o.buf[j].compare(*o.run.at(i)) < 0 {
			*o.run.at(w) = *o.run.at(i)
			i--
		} else {
			*o.run.at(w) = o.buf[j]
			j--
		}
	}
	o.buf = o.buf[:0]
}

// search returns the index of the first pair of the run whose key is at
// least k.
func (o *order) search(k int64) int {
	return sort.Search(o.run.n, func(i int) bool { return o.run.at(i).k >= k })
}

// walk calls fn with the pairs whose key is at least from, in order, dead
// ones included, until fn returns false.
func (o *order) walk(from int64, fn func(pair) bool) {
	i := o.search(from)
	var b []pair
	for _, p := range o.buf {
		if p.k >= from {
			b = append(b, p)
		}
	}
	slices.SortFunc(b, pair.compare)
	j := 0
	for i < o.run.n || j < len(b) {
		var p pair
		if j == len(b) || i < o.run.n && o.run.at(i).compare(b[j]) < 0 {
			p = *o.run.at(i)
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
	for i := o.search(k); i < o.run.n && o.run.at(i).k == k; i++ {
		dst = append(dst, o.run.at(i).r)
	}
	for _, p := range o.buf {
		if p.k == k {
			dst = append(dst, p.r)
		}
	}
	slices.Sort(dst[start:])
	return dst
}

// pairChunk is the number of pairs of a chunk of a run (64 KiB).
const pairChunk = 4096

// pairs is a sequence of pairs in chunks of pairChunk: it grows and
// shrinks without copying, and its chunks are all of one size, so the
// heap reuses what a shrink gives back.
type pairs struct {
	chunks [][]pair
	n      int
}

func (v *pairs) at(i int) *pair { return &v.chunks[i/pairChunk][i%pairChunk] }

// resize sets the length to n: new pairs are zero; chunks past the end go.
func (v *pairs) resize(n int) {
	for len(v.chunks)*pairChunk < n {
		v.chunks = append(v.chunks, make([]pair, pairChunk))
	}
	keep := (n + pairChunk - 1) / pairChunk
	clear(v.chunks[keep:])
	v.chunks = v.chunks[:keep]
	v.n = n
}
