package wheel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTickQueueSort checks the tick sort against a comparison sort: few
// and many entries, partitions below and above sortParts, due times spread
// over the tick or all in one millisecond (ties by partition and offset).
func TestTickQueueSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const tick = 7
	for _, tc := range []struct {
		name  string
		n     int
		parts int32
		dues  int64
	}{
		{"few", 40, 18, 100},
		{"spread", 300, 18, 100},
		{"burst", 2000, 18, 1},
		{"many-partitions", 300, 1000, 100},
		{"negative-partition", 300, -1, 100},
		{"one-partition", 500, 1, 3},
		{"reversed", 3000, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &tickQueue{width: 100, tick: tick}
			for round := range 20 {
				c := make([]cand, tc.n)
				for i := range c {
					part := int32(0)
					switch {
					case tc.parts < 0:
						part = -int32(r.IntN(3))
					case tc.parts > 0:
						part = r.Int32N(tc.parts)
					}
					c[i] = cand{due: tick*100 + r.Int64N(tc.dues), off: r.Int64N(50), part: part, pos: uint32(i)}
				}
				if tc.name == "reversed" { // a burst's chains: offsets descending
					slices.SortFunc(c, func(a, b cand) int { return -cmpCand(a, b) })
				}
				want := slices.Clone(c)
				slices.SortStableFunc(want, cmpCand)
				q.sort(c)
				for i := range c {
					if cmpCand(c[i], want[i]) != 0 {
						t.Fatalf("round %d: entry %d is %+v, want %+v", round, i, c[i], want[i])
					}
				}
			}
		})
	}
}
