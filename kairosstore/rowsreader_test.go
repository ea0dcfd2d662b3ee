package kairosstore

import "github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"

// The embedded engine reads rollup rows through one iterator: a change of
// its signature would silently fall back to a Cells call per row.
var _ rowsReader = (*pebblekv.Engine)(nil)
