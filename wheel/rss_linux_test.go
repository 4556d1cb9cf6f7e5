package wheel

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time (user and system) the process has used: with
// cpu-ns/op, a benchmark reports its cost on a machine shared with other
// work, where wall time mostly measures the neighbours. It includes every
// goroutine of the process (GC, background compaction).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pageFaults returns the page faults of the process so far (minor ones:
// the segments are in the page cache).
func pageFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Minflt + ru.Majflt
}

// reportRSS reports the process's resident memory from /proc/self/status in
// MB: VmRSS as rss-MB, RssFile (mapped file pages: segments and indexes)
// as rss-file-MB, RssAnon (heap, stacks) as rss-anon-MB, with prefix.
func reportRSS(b *testing.B, prefix string) {
	kb := procStatusKB()
	for field, metric := range map[string]string{"VmRSS": "rss-MB", "RssFile": "rss-file-MB", "RssAnon": "rss-anon-MB"} {
		if v, ok := kb[field]; ok {
			b.ReportMetric(float64(v)/1024, prefix+metric)
		}
	}
}

// procStatusKB returns the kB-valued fields of /proc/self/status (VmRSS,
// RssFile, RssAnon, ...) by name, nil when it cannot be read.
func procStatusKB() map[string]int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	kb := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[2] == "kB" {
			if v, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
				kb[strings.TrimSuffix(fs[0], ":")] = v
			}
		}
	}
	return kb
}
