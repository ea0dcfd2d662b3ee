package rollupjob_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// TestSlowWriteBelowTheDoneRange: a write of history just below the done
// range whose samples land after the backfill read their span
// (BeforeChange, the backfill, the samples, AfterChange) is recomputed
// once they have landed. From another process, the backfill holds the
// span while the mark is young, then reads it without the samples still in
// flight; from this process, it reads the span at once. Either way the
// write, held longer than MarkSlack/4, marks again after it landed.
func TestSlowWriteBelowTheDoneRange(t *testing.T) {
	for _, own := range []bool{false, true} {
		name := "another process"
		if own {
			name = "this process"
		}
		t.Run(name, func(t *testing.T) {
			engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
				eng := open(t)
				clk, data := seeded(t, eng)
				gate := newGate(eng)
				a := newNode(t, gate, clk, "a")
				a.run(t)
				from, _, _ := done(t, a.store, m5)
				writer := a
				if !own {
					writer = newNode(t, gate, clk, "b")
				}

				// Before the oldest sample of x: units 989h and 990h,
				// below the done range, marked with 991h, inside it.
				ts, vs := []int64{988*hour + 30*minute, 989*hour + 30*minute}, []float64{11, 12}
				release := inFlight(t, writer, gate, data[0].ls, ts, vs)
				a.run(t)
				now, _, _ := done(t, a.store, m5)
				if own {
					require.Less(t, now, from, "read at once, without the samples in flight")
				} else {
					require.Equal(t, from, now, "held while the mark is young")
					settle(clk)
					a.run(t)
					now, _, _ = done(t, a.store, m5)
					require.Less(t, now, from, "read once the mark ripened, without the samples in flight")
				}
				settle(clk)
				a.run(t)
				require.Empty(t, marks(t, a), "the mark is done")
				require.NoError(t, release())
				record(data, 0, ts, vs)
				require.NotEmpty(t, marks(t, a), "marked again after landing")
				settle(clk)
				a.run(t)
				require.Equal(t, expected(data, 1000*hour), stored(t, a.store, "x", "y"))
				require.Empty(t, marks(t, a))
			})
		})
	}
}

// killed is a Guard of a process killed (kill -9) during a commit: after
// BeforeChange stored its marks and before the samples were written, or,
// with landed, after they were written and before AfterChange.
type killed struct {
	j      *rollupjob.Job
	landed bool
}

var errKilled = errors.New("killed")

func (k *killed) BeforeChange(ctx context.Context, cs []kairosstore.Change) error {
	if err := k.j.BeforeChange(ctx, cs); err != nil || k.landed {
		return err
	}
	return errKilled
}

func (k *killed) AfterChange(context.Context, []kairosstore.Change, time.Time) error {
	return errKilled
}

// TestHoldAndKill: kill -9 at the moments the hold adds. A writer of
// another process killed after its mark was stored, before its samples or
// after them, leaves a mark that ripens and is done as any other; the job
// killed while it holds a span loses the hold with its memory, and the
// next process's job, which reads the marks young again, holds the span
// again. The rollups come out as the samples that landed give.
func TestHoldAndKill(t *testing.T) {
	for _, landed := range []bool{false, true} {
		name := "before the samples"
		if landed {
			name = "after the samples"
		}
		t.Run(name, func(t *testing.T) {
			engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
				eng := open(t)
				clk, data := seeded(t, eng)
				a := newNode(t, eng, clk, "a")
				a.run(t)
				from, _, _ := done(t, a.store, m5)

				k := &killed{landed: landed}
				bs, err := kairosstore.Open(t.Context(), eng, kairosstore.Options{Now: clk.Now, Guard: k}, nil, prometheus.NewRegistry())
				require.NoError(t, err)
				k.j, err = rollupjob.New(bs, rollupjob.Config{Resolutions: []rollup.Resolution{m5, h1}, Delay: 10 * time.Minute, Owner: "b", Now: clk.Now}, nil, prometheus.NewRegistry())
				require.NoError(t, err)
				ts, vs := []int64{988*hour + 30*minute, 989*hour + 30*minute}, []float64{11, 12}
				app := bs.NewAppender()
				for i := range ts {
					_, err := app.Append(0, data[0].ls, ts[i], vs[i])
					require.NoError(t, err)
				}
				require.ErrorIs(t, app.Commit(t.Context()), errKilled)
				if landed {
					record(data, 0, ts, vs)
				}
				require.NotEmpty(t, marks(t, a))

				a.run(t)
				now, _, _ := done(t, a.store, m5)
				require.Equal(t, from, now, "held while the mark is young")
				// a is killed: the same adapter again, with nothing in memory.
				a = newNode(t, eng, clk, "a")
				a.run(t)
				now, _, _ = done(t, a.store, m5)
				require.Equal(t, from, now, "held again by the next process")
				settle(clk)
				a.run(t)
				require.Empty(t, marks(t, a))
				require.Equal(t, expected(data, 1000*hour), stored(t, a.store, "x", "y"))
			})
		})
	}
}

// TestHoldOfHostileTimes: another process's write at Prometheus's minimum
// time, with NaN, ±Inf and 1e300 among its values, marks every unit from
// then to the present. The serving job holds its backfill for MarkSlack at
// most, also while the writer stores the mark again and keeps it young,
// and then rolls every sample up in a few steps, not a step per unit of the
// 2.5·10^12 hours the mark covers.
func TestHoldOfHostileTimes(t *testing.T) {
	eng := openPebble(t)
	clk, data := seeded(t, eng)
	a := newNode(t, eng, clk, "a")
	a.run(t)
	from, _, _ := done(t, a.store, m5)
	b := newNode(t, eng, clk, "b")

	promMin := int64(math.MinInt64/1000+62135596801) * 1000 // -292273086-05-16T16:47:06Z
	lateWrite(t, b, data, 1, []int64{promMin, 989*hour + 1, 989*hour + 2, 989*hour + 3}, []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300})
	require.Len(t, marks(t, a), 1)
	a.run(t)
	now, _, _ := done(t, a.store, m5)
	require.Equal(t, from, now, "held while the mark is young")
	// b stores the mark again: it stays young past the hold's bound.
	clk.set(clk.ms.Load() + 20_000)
	lateWrite(t, b, data, 1, []int64{promMin, 989*hour + 1, 989*hour + 2, 989*hour + 3}, []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300})
	a.run(t)
	now, _, _ = done(t, a.store, m5)
	require.Equal(t, from, now, "held while the mark is young")
	clk.set(clk.ms.Load() + 11_000)
	worked, err := a.job.Step(t.Context())
	require.NoError(t, err)
	require.True(t, worked)
	now, _, _ = done(t, a.store, m5)
	require.Less(t, now, from, "read once held for MarkSlack, the mark still young")
	require.Len(t, marks(t, a), 1)
	settle(clk)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		require.Less(t, i, 30, "the job finishes in a few steps")
		worked, err := a.job.Step(ctx)
		require.NoError(t, err)
		if !worked {
			break
		}
	}
	require.Empty(t, marks(t, a))
	got := stored(t, a.store, "x")
	for _, want := range expected(data, 1000*hour) {
		if strings.Contains(want, `saved_from="x"`) && !strings.Contains(want, "@-") {
			require.Contains(t, got, want)
		}
	}
}
