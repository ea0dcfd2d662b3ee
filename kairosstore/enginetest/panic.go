package enginetest

import (
	"bytes"
	"context"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// PanicCells is an engine whose data_points reads of row keys containing
// Bad panic with "no codec expected this": a cell no codec expected, or a
// bug, met on a goroutine of the adapter's own (tests of
// internal/recovered's callers).
type PanicCells struct {
	engine.Engine
	Bad []byte
}

func (e *PanicCells) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	if bytes.Contains(key, e.Bad) {
		panic("no codec expected this")
	}
	return e.Engine.Cells(ctx, key, lo, hi, fn)
}
