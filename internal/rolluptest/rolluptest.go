// Package rolluptest writes rollups for tests of the read side, as the
// rollup job would: rollup.Compute over samples the test generated, through
// the store's Appender, and the progress key that makes reads use them.
package rolluptest

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Series is one raw float series: timestamps ascending, and its values.
type Series struct {
	Labels labels.Labels
	T      []int64
	V      []float64
}

// Write rolls up every series at each resolution for the buckets ending in
// [from, to] and records that range as done (rollup.DoneKey).
func Write(ctx context.Context, st *kairosstore.Store, eng engine.Engine, res []rollup.Resolution, from, to int64, series []Series) error {
	for _, r := range res {
		app := st.NewAppender()
		n := 0
		for _, s := range series {
			for _, p := range rollup.Compute(r, from-r.Millis(), to, s.T, s.V) {
				for _, a := range rollup.Aggregates {
					if _, err := app.Append(0, rollup.SeriesLabels(s.Labels, r, a), p.End, p.Value(a)); err != nil {
						return fmt.Errorf("append rollup of %s: %w", s.Labels, err)
					}
				}
				if n++; n%10000 == 0 {
					if err := app.Commit(ctx); err != nil {
						return err
					}
					app = st.NewAppender()
				}
			}
		}
		if err := app.Commit(ctx); err != nil {
			return err
		}
		if err := eng.SetServiceValue(ctx, rollup.Service, rollup.ServiceKey, rollup.DoneKey(r), rollup.FormatDone(from, to), time.Now().UnixMilli()); err != nil {
			return err
		}
	}
	return nil
}
