//go:build race

package kairosstore

// raceEnabled: the race detector keeps values on the heap that escape
// analysis would otherwise put on the stack, so allocation bounds do not
// hold under it.
const raceEnabled = true
