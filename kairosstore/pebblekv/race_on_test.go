//go:build race

package pebblekv

// raceEnabled: the race detector keeps more values on the heap that escape
// analysis would otherwise put on the stack, so allocation bounds measured
// under it are looser.
const raceEnabled = true
