package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// cdfSVG draws the lateness CDF of every run with lateness samples: x is
// lateness on a log scale (values under 1 ms drawn at 1 ms), y the fraction
// of records delivered at most that late.
func cdfSVG(res *results) string {
	const (
		w, h                   = 760, 440
		left, right, top, bott = 64, 200, 36, 52
	)
	pw, ph := float64(w-left-right), float64(h-top-bott)
	var series []*result
	maxMs := 10.0
	for _, r := range res.Results {
		if len(r.late) > 0 {
			series = append(series, r)
			maxMs = max(maxMs, r.late[len(r.late)-1])
		}
	}
	decades := int(math.Ceil(math.Log10(maxMs)))
	x := func(v float64) float64 {
		return float64(left) + pw*math.Log10(max(v, 1))/float64(decades)
	}
	y := func(q float64) float64 { return float64(top) + ph*(1-q) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="20" font-size="14">kdelay lateness CDF (target LogAppendTime - kdelay-due-at), %s</text>`+"\n", left, html.EscapeString(res.Broker))
	for d := 0; d <= decades; d++ {
		v := math.Pow(10, float64(d))
		xv := x(v)
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xv, top, xv, h-bott)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xv, h-bott+16, ms(v))
	}
	for _, q := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
		yv := y(q)
		dash := ""
		if q == 0.99 || q == 0.9 {
			dash = ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"%s/>`+"\n", left, yv, w-right, yv, dash)
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, yv+4, q)
	}
	fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&sb, `<text x="%.0f" y="%d" text-anchor="middle">lateness (log scale; under 1 ms drawn at 1 ms)</text>`+"\n", float64(left)+pw/2, h-12)
	fmt.Fprintf(&sb, `<text x="16" y="%.0f" text-anchor="middle" transform="rotate(-90 16 %.0f)">fraction of records</text>`+"\n", float64(top)+ph/2, float64(top)+ph/2)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}
	for i, r := range series {
		c := colors[i%len(colors)]
		n := len(r.late)
		idx := []int{0, n - 1}
		for k := 0; k < n; k += max(n/400, 1) {
			idx = append(idx, k)
		}
		for _, q := range []float64{0.99, 0.995, 0.999, 0.9999} {
			idx = append(idx, min(int(q*float64(n)), n-1))
		}
		slices.Sort(idx)
		idx = slices.Compact(idx)
		pts := make([]string, 0, len(idx))
		for _, k := range idx {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.late[k]), y(float64(k+1)/float64(n))))
		}
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		ly := top + 14 + 18*i
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", w-right+10, ly-4, w-right+28, ly-4, c)
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", w-right+32, ly, html.EscapeString(r.name()))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}
