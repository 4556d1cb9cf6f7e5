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
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return
	}
	defer f.Close()
	names := map[string]string{"VmRSS:": "rss-MB", "RssFile:": "rss-file-MB", "RssAnon:": "rss-anon-MB"}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && names[fs[0]] != "" {
			if kb, err := strconv.ParseFloat(fs[1], 64); err == nil {
				b.ReportMetric(kb/1024, prefix+names[fs[0]])
			}
		}
	}
}
