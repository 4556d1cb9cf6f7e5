//go:build unix

package main

import "syscall"

// processCPU returns the CPU time (user and system, every thread) this
// process has used, in seconds; ok is false where it cannot be read.
func processCPU() (seconds float64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, true
}
