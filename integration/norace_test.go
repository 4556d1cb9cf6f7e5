//go:build !race

package integration

// raceEnabled: the test binary has no -race, nor has the kdelay binary.
const raceEnabled = false
