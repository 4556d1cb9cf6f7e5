//go:build race

package integration

// raceEnabled: the test binary has -race, so the kdelay binary is built
// with it too.
const raceEnabled = true
