package cql

// Test hooks for the external tests and benchmarks of this package.

// Grouping names a write grouping strategy for tests.
type Grouping = grouping

// The two strategies behind Write and Delete.
const (
	GroupSingles    = groupSingles
	GroupPartitions = groupPartitions
)

// SetGrouping switches the grouping of e; call it before e is shared.
func SetGrouping(e *Engine, g Grouping) { e.grouping = g }
