package frontend

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// TestForeignWriteVisibleWithinTTL writes on the real Cassandra node
// through a second store over the same keyspace, as a second adapter (or
// KairosDB) would: the frontend cannot hear of it, so the cached answer
// stays until --query.results-cache-ttl, and is fresh after it.
func TestForeignWriteVisibleWithinTTL(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	ctx := context.Background()
	open := func(onChange func([]kairosstore.Change)) *kairosstore.Store {
		eng := cassandratest.Engine(t, addr, keyspace)
		require.NoError(t, eng.Setup(ctx))
		s, err := kairosstore.Open(ctx, eng, kairosstore.Options{OnChange: onChange}, nil, nil)
		require.NoError(t, err)
		return s
	}
	const ttl = 30 * time.Minute
	now := midnight.Add(24 * time.Hour)
	var front *Frontend
	ours := open(func(cs []kairosstore.Change) { front.OnChange(cs) })
	whole := queryAPI(ours)
	front = New(whole, Options{CacheBytes: 1 << 20, CacheTTL: ttl, Now: func() time.Time { return now }}, prometheus.NewRegistry(), nil)
	theirs := open(nil)

	write := func(s *kairosstore.Store, room string, ts time.Time, v float64) {
		app := s.NewAppender()
		_, err := app.Append(0, labels.FromStrings("__name__", "temperature", "room", room), ts.UnixMilli(), v)
		require.NoError(t, err)
		require.NoError(t, app.Commit(ctx))
	}
	for ts := midnight.Add(-time.Hour); ts.Before(midnight.Add(time.Hour)); ts = ts.Add(time.Minute) {
		write(ours, "r1", ts, 20)
	}
	form := rangeForm(`max(temperature)`, midnight.Add(-50*time.Minute), midnight.Add(50*time.Minute), time.Minute)
	first := ask(t, front, form, nil)
	require.Equal(t, http.StatusOK, first.code, first.body)

	write(theirs, "r2", midnight.Add(-30*time.Minute+time.Second), 99)
	require.NotEqual(t, first.body, ask(t, whole, form, nil).body, "the store has it")
	now = now.Add(ttl - time.Second)
	require.Equal(t, first, ask(t, front, form, nil), "within the TTL, the cache has not heard of it")
	now = now.Add(2 * time.Second)
	sameAnswer(t, "after the TTL", ask(t, whole, form, nil), ask(t, front, form, nil))

	// The same write through our own store is seen at once.
	cached := ask(t, front, form, nil)
	write(ours, "r3", midnight.Add(20*time.Minute+time.Second), 100)
	got := ask(t, front, form, nil)
	require.NotEqual(t, cached.body, got.body)
	sameAnswer(t, "our own write", ask(t, whole, form, nil), got)
}
