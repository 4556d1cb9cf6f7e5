//go:build !unix

package main

// processCPU is not measured here: the ceiling then reports no client CPU.
func processCPU() (seconds float64, ok bool) { return 0, false }
