package wheel

import (
	"syscall"
	"time"
)

// release drops the page-table entries of b, a shared read-only mapping of
// a file: the process's RSS no longer counts those pages (the page cache
// keeps them), and the next read maps them again from the page cache.
func release(b []byte) {
	if len(b) > 0 {
		syscall.Madvise(b, syscall.MADV_DONTNEED) // advice only: an error changes nothing
	}
}

// threadCPU returns the CPU time of the calling thread (RUSAGE_THREAD).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1, &ru) != nil { // 1: RUSAGE_THREAD
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
