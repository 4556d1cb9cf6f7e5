package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// cdfSVG draws the lateness CDF of every run of the first --repeat round
// with lateness samples (later rounds would only crowd the legend; their
// figures are in results.md), in two
// panels sharing a log-scale x axis (lateness; values under 1 ms drawn at
// 1 ms): the whole distribution on a linear y axis, and the tail on a
// "nines" axis (0.9, 0.99, 0.999, 0.9999), where p99 and p99.9 are read off.
func cdfSVG(res *results) string {
	const (
		w                 = 780
		left, right, top  = 70, 200, 40
		panelH, gap, bott = 260, 56, 56
	)
	h := top + 2*panelH + gap + bott
	pw := float64(w - left - right)
	var series []*result
	maxMs := 10.0
	for _, r := range res.Results {
		if len(r.CDF) > 0 && r.Rep <= 1 && r.Scenario != "sustained" { // the sustained steps: their table
			series = append(series, r)
			maxMs = max(maxMs, r.CDF[len(r.CDF)-1][0])
		}
	}
	decades := max(int(math.Ceil(math.Log10(maxMs))), 1)
	x := func(v float64) float64 {
		return float64(left) + pw*math.Log10(max(v, 1))/float64(decades)
	}
	const maxNines = 4.0
	panels := []struct {
		title string
		top   int
		y     func(q float64) float64 // q in [0,1] -> 0 (bottom) .. 1 (top)
		ticks []float64
	}{
		{"CDF", top, func(q float64) float64 { return q }, []float64{0, 0.25, 0.5, 0.75, 1}},
		{"tail (nines scale)", top + panelH + gap, func(q float64) float64 {
			if q >= 1 {
				return 1
			}
			return min(-math.Log10(1-q), maxNines) / maxNines
		}, []float64{0, 0.9, 0.99, 0.999, 0.9999}},
	}
	broker := "real broker " + res.Broker
	if strings.HasPrefix(res.Broker, "kfake") {
		broker = res.Broker
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="22" font-size="14">kdelay lateness (target LogAppendTime - kdelay-due-at), %s</text>`+"\n", left, html.EscapeString(broker))
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}
	for _, p := range panels {
		y := func(q float64) float64 { return float64(p.top) + float64(panelH)*(1-p.y(q)) }
		bottom := p.top + panelH
		for d := 0; d <= decades; d++ {
			v := math.Pow(10, float64(d))
			xv := x(v)
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xv, p.top, xv, bottom)
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xv, bottom+16, tickMs(v))
		}
		for _, q := range p.ticks {
			yv := y(q)
			fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yv, w-right, yv)
			fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, yv+4, q)
		}
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#333"/>`+"\n", left, p.top, pw, panelH)
		fmt.Fprintf(&sb, `<text x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>`+"\n", p.top+panelH/2, p.top+panelH/2, p.title)
		for i, r := range series {
			pts := make([]string, 0, len(r.CDF))
			for _, pt := range r.CDF {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(pt[0]), y(pt[1])))
			}
			fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", colors[i%len(colors)], strings.Join(pts, " "))
		}
	}
	fmt.Fprintf(&sb, `<text x="%.0f" y="%d" text-anchor="middle">lateness (log scale; under 1 ms drawn at 1 ms)</text>`+"\n", float64(left)+pw/2, h-14)
	for i, r := range series {
		c := colors[i%len(colors)]
		ly := top + 14 + 18*i
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", w-right+10, ly-4, w-right+28, ly-4, c)
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", w-right+32, ly, html.EscapeString(r.name()))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

func tickMs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gs", v/1000)
	}
	return fmt.Sprintf("%gms", v)
}
