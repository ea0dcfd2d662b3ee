//go:build !race

package pebblekv

const raceEnabled = false
