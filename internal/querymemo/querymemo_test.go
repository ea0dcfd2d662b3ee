package querymemo

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDo(t *testing.T) {
	ctx := With(context.Background())
	m := From(ctx)
	require.NotNil(t, m)
	require.Nil(t, From(context.Background()))

	// Concurrent callers of one key share the first one's read.
	var reads atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, err := m.Do(ctx, "k", func() (bool, error) {
				reads.Add(1)
				<-release
				return true, nil
			})
			require.NoError(t, err)
			require.True(t, v)
		})
	}
	for reads.Load() == 0 {
		runtime.Gosched() // until one read runs; the others then find its call
	}
	close(release)
	wg.Wait()
	require.Equal(t, int64(1), reads.Load())

	// A failed read is not remembered; nor is a panicking one, whose
	// caller sees the panic.
	boom := errors.New("boom")
	_, err := m.Do(ctx, "e", func() (bool, error) { return false, boom })
	require.ErrorIs(t, err, boom)
	require.Panics(t, func() { _, _ = m.Do(ctx, "e", func() (bool, error) { panic("read") }) })
	v, err := m.Do(ctx, "e", func() (bool, error) { return false, nil })
	require.NoError(t, err)
	require.False(t, v)
	v, err = m.Do(ctx, "e", func() (bool, error) { return true, nil }) // the first answer stays
	require.NoError(t, err)
	require.False(t, v)

	// A nil memo and a full one read every time.
	var none *Memo
	n := 0
	for range 2 {
		_, _ = none.Do(ctx, "k", func() (bool, error) { n++; return true, nil })
	}
	require.Equal(t, 2, n)
	big := strings.Repeat("x", 1<<20)
	for i := 0; m.bytes+len(big)+1 <= maxBytes; i++ {
		_, _ = m.Do(ctx, fmt.Sprint(i, big), func() (bool, error) { return true, nil })
	}
	held, size := len(m.m), m.bytes
	require.LessOrEqual(t, size, maxBytes)
	n = 0
	for range 2 {
		_, _ = m.Do(ctx, "over"+big, func() (bool, error) { n++; return true, nil })
	}
	require.Equal(t, 2, n)
	require.Equal(t, held, len(m.m))
	require.Equal(t, size, m.bytes)
}

func TestDoWaiterLeavesOnCancel(t *testing.T) {
	m := From(With(context.Background()))
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = m.Do(context.Background(), "k", func() (bool, error) { close(started); <-release; return true, nil })
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Do(ctx, "k", func() (bool, error) { t.Error("read twice"); return false, nil })
	require.ErrorIs(t, err, context.Canceled)
	close(release)
}
