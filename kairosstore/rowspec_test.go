package kairosstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestRowSpecFromOptions checks that the configured row width reaches the
// spec table in the unit's terms (§3.3): seconds with SECONDS, milliseconds
// otherwise, KairosDB's three weeks when unset. A fresh store writes the spec
// table, so the test reads back what a KairosDB would see.
func TestRowSpecFromOptions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unit      codec.TimeUnit
		width     time.Duration
		wantUnit  string
		wantWidth string
	}{
		{"default", codec.Milliseconds, 0, "MILLISECONDS", "1814400000"},
		{"ms one hour", codec.Milliseconds, time.Hour, "MILLISECONDS", "3600000"},
		{"ms odd width", codec.Milliseconds, 90*time.Minute + 1500*time.Millisecond, "MILLISECONDS", "5401500"},
		{"seconds three weeks", codec.Seconds, 504 * time.Hour, "SECONDS", "1814400"},
		{"seconds one hour", codec.Seconds, time.Hour, "SECONDS", "3600"},
		{"seconds default", codec.Seconds, 0, "SECONDS", "1814400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, eng.Close()) })
			require.NoError(t, eng.Setup(ctx))
			s, err := Open(ctx, eng, Options{RowTimeUnit: tc.unit, RowWidth: tc.width}, nil, nil)
			require.NoError(t, err)
			require.Equal(t, tc.unit, s.Spec().Unit)
			for name, want := range map[string]string{"row_time_unit": tc.wantUnit, "row_width": tc.wantWidth} {
				got, ok, err := eng.Spec(ctx, name)
				require.NoError(t, err)
				require.True(t, ok, name)
				require.Equal(t, want, got, name)
			}
		})
	}
}
