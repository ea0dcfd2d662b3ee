package importer

import (
	"fmt"
	"time"
)

// Span is a time range in ms, both ends included, as remote read's queries
// and the adapter's reads take them.
type Span struct{ Start, End int64 }

// MaxSlices bounds a remote-read import's plan: each slice is one request
// and one progress mark, so a slice length far too short for the range is
// refused before anything is read.
const MaxSlices = 1_000_000

// Slices is [start, end] cut at the multiples of step since the epoch, the
// first and last slice clipped to it. The cuts do not depend on start and
// end, so that a rerun with a later --end finds the slices done before under
// the same keys, all but the last. It returns the number of slices and a
// function giving the i-th; nothing is allocated per slice.
func Slices(start, end int64, step time.Duration) (int, func(i int) Span, error) {
	ms := step.Milliseconds()
	if ms <= 0 || step%time.Millisecond != 0 {
		return 0, nil, fmt.Errorf("the slice length %s must be a positive whole number of milliseconds", step)
	}
	if end < start {
		return 0, nil, fmt.Errorf("the end %s is before the start %s", fmtMillis(end), fmtMillis(start))
	}
	first := floorDiv(start, ms)
	last := floorDiv(end, ms)
	// Prometheus's times in ms reach within a second of both ends of the
	// int64 range: the count is computed in uint64, where last-first is
	// exact, and the clipped ends are taken as they are rather than
	// computed from k*ms, which may overflow.
	if d := uint64(last) - uint64(first); d >= MaxSlices {
		return 0, nil, fmt.Errorf("%s to %s in slices of %s is %d slices, more than %d: give a longer slice length", fmtMillis(start), fmtMillis(end), step, d+1, MaxSlices)
	}
	n := int(last-first) + 1
	return n, func(i int) Span {
		k := first + int64(i)
		sp := Span{Start: start, End: end}
		if i > 0 {
			sp.Start = k * ms
		}
		if i < n-1 {
			sp.End = k*ms + ms - 1
		}
		return sp
	}, nil
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func fmtMillis(t int64) string {
	return time.UnixMilli(t).UTC().Format(time.RFC3339Nano)
}
