package kairosstore_test

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestNoMatchersSelectNothing: a query or delete with no matchers at all
// selects nothing, as in Prometheus's TSDB, on a store that holds data. A
// selector that matches everything on purpose still does.
func TestNoMatchersSelectNothing(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		a := lbl("__name__", "everything", "k", "a")
		b := lbl("__name__", "else", "k", "b")
		data := map[string][]sample{
			a: {{10, bits(1)}, {15, bits(math.NaN())}, {hour + 10, bits(3)}},
			b: {{20, bits(2)}},
		}
		write(t, s, data)

		require.Empty(t, read(t, s, math.MinInt64, math.MaxInt64), "no matchers")
		n, err := s.Delete(context.Background(), math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		require.Zero(t, n, "rows deleted by a delete without matchers")

		all := labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")
		require.Equal(t, sortByLabels(t, expect(data, math.MinInt64, math.MaxInt64, nil)), read(t, s, math.MinInt64, math.MaxInt64, all))
	})
}
