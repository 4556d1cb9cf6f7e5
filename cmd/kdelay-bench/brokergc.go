package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// brokerPause is one stop-the-world pause of the broker's JVM, read from
// its GC log (-Xlog:gc with the time decorator, as .ci/kafka.sh writes it
// to gc.log in its state directory).
type brokerPause struct {
	EndMs int64   // when the pause ended, unix ms (the line's time stamp)
	Ms    float64 // how long it lasted
}

// pauseLine matches a unified-logging GC line of a pause:
// "[2026-12-03T19:15:05.618+0000] GC(105) Pause Young (Normal) (G1
// Evacuation Pause) 203M->83M(256M) 29.278ms". Other decorators may follow
// the time; concurrent phases ("Concurrent Mark Cycle") are not pauses.
var pauseLine = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d{4})\].* Pause .* ([0-9.]+)ms$`)

// parsePause reads one GC log line; ok is false for lines that are not a
// pause with a time stamp.
func parsePause(line string) (brokerPause, bool) {
	m := pauseLine.FindStringSubmatch(line)
	if m == nil {
		return brokerPause{}, false
	}
	t, err := time.Parse("2006-01-02T15:04:05.000-0700", m[1])
	if err != nil {
		return brokerPause{}, false
	}
	ms, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return brokerPause{}, false
	}
	return brokerPause{EndMs: t.UnixMilli(), Ms: ms}, true
}

// readBrokerPauses reads every pause of the GC log at path.
func readBrokerPauses(path string) ([]brokerPause, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("broker GC log: %w", err)
	}
	defer f.Close()
	var out []brokerPause
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := parsePause(sc.Text()); ok {
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("broker GC log %s: %w", path, err)
	}
	return out, nil
}

// pauseSummary is what the broker's GC paused during a run.
type pauseSummary struct {
	Count   int     `json:"count"`
	TotalMs float64 `json:"total_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// pauseReach is how long after a window of due time begins a broker pause
// may end and still have held records due in it: the window (100 ms) and
// the lateness of the records it holds (tens of ms).
const pauseReach = 150

// attributePauses fills r.BrokerPauses with the pauses that ended between
// r's first due time and its last delivery, and marks each late window with
// the longest pause that ended within pauseReach of its start: records of
// that window waited, at least in part, for the broker, not for the relay.
func (r *result) attributePauses(pauses []brokerPause) {
	if r.DueMs <= 0 {
		return
	}
	end := r.DueMs + int64(r.CompletionMs)
	s := &pauseSummary{}
	for _, p := range pauses {
		if p.EndMs >= r.DueMs && p.EndMs <= end {
			s.Count++
			s.TotalMs += p.Ms
			s.MaxMs = max(s.MaxMs, p.Ms)
		}
	}
	r.BrokerPauses = s
	if bd := r.Breakdown; bd != nil {
		bd.NearBrokerGC = 0
		for _, w := range r.lateAll {
			start := r.DueMs + w.StartMs
			for _, p := range pauses {
				if p.EndMs >= start && p.EndMs < start+pauseReach {
					bd.NearBrokerGC += w.Late
					break
				}
			}
		}
	}
	for i := range r.LateWindows {
		w := &r.LateWindows[i]
		start := r.DueMs + w.StartMs
		for _, p := range pauses {
			if p.EndMs >= start && p.EndMs < start+pauseReach {
				w.BrokerPauseMs = max(w.BrokerPauseMs, p.Ms)
			}
		}
	}
}
