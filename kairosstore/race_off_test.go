//go:build !race

package kairosstore

const raceEnabled = false
