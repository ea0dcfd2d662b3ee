package adapter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// fakeSample is one stored float or histogram sample.
type fakeSample struct {
	t  int64
	f  float64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

func (s fakeSample) T() int64                      { return s.t }
func (fakeSample) ST() int64                       { return 0 }
func (s fakeSample) F() float64                    { return s.f }
func (s fakeSample) H() *histogram.Histogram       { return s.h }
func (s fakeSample) FH() *histogram.FloatHistogram { return s.fh }
func (s fakeSample) Copy() chunks.Sample           { return s }

func (s fakeSample) Type() chunkenc.ValueType {
	switch {
	case s.h != nil:
		return chunkenc.ValHistogram
	case s.fh != nil:
		return chunkenc.ValFloatHistogram
	default:
		return chunkenc.ValFloat
	}
}

type fakeSeries struct {
	ls        labels.Labels
	samples   []fakeSample // sorted by t; a later write of the same t wins
	exemplars []exemplar.Exemplar
}

// errInvalidSeries is what the fake's Append returns for a series without
// __name__, as the real store does.
var errInvalidSeries = errors.New("missing metric name")

// fakeStore is an in-memory Store that records what was committed.
type fakeStore struct {
	mu       sync.Mutex
	series   map[string]*fakeSeries // by labels.String()
	meta     map[string][]metadata.Metadata
	commits  int
	appended int // calls to Append*, committed or not
	refs     int // appends by labels (ref 0): series looked up by their labels
	// byRef are the series by ref-1, refOf their refs by labels.String().
	byRef []labels.Labels
	refOf map[string]SeriesRef
	// forgetRefs makes the appender refuse every ref (UnknownRefError),
	// as a store that evicted them does.
	forgetRefs bool

	// Injected failures.
	appendErr   func(ls labels.Labels) error
	exemplarErr error // AppendExemplar fails, the series' samples stay
	// minTime, when set, makes items before it refused alone (an
	// ItemError), as the real store refuses timestamps its layout cannot
	// hold.
	minTime     *int64
	grown       []int // sizes announced through Grow, one per request
	commitErr   error
	readyErr    error
	querierErr  error
	selectErr   error
	maxSeries   int // like the real store's --query.max-series
	metadataErr error
	// commitGate, when set, blocks Commit until it is closed.
	commitGate chan struct{}
	// selectGate, when set, blocks Select until it is closed.
	selectGate chan struct{}
	// atGate gets a value each time a Commit or Select starts waiting at
	// its gate (see waitAtGate).
	atGate chan struct{}
	// unsorted makes Select return series in reverse order, a store bug.
	unsorted bool
	// selects records the matchers and sortSeries flag of every Select.
	selects []selectCall
}

type selectCall struct {
	sorted   bool
	matchers []*labels.Matcher
}

func newFakeStore() *fakeStore {
	return &fakeStore{series: map[string]*fakeSeries{}, meta: map[string][]metadata.Metadata{}, refOf: map[string]SeriesRef{}, atGate: make(chan struct{}, 64)}
}

func (s *fakeStore) reachGate() {
	select {
	case s.atGate <- struct{}{}:
	default:
	}
}

// waitAtGate waits until a request waits at the commit or select gate: it
// then holds its slot. The in-flight gauge is no such sign: a request is
// counted before it takes a slot, so a second request sent in between took
// the slot and waited at the gate for ever.
func waitAtGate(t *testing.T, s *fakeStore) {
	t.Helper()
	select {
	case <-s.atGate:
	case <-time.After(timeout):
		t.Fatal("no request reached the gate")
	}
}

func (s *fakeStore) NewAppender() Appender { return &fakeAppender{s: s, invalid: map[string]bool{}} }

func (s *fakeStore) Ready(context.Context) error { return s.readyErr }

func (s *fakeStore) Metadata(_ context.Context, metric string, limit int) (map[string][]metadata.Metadata, error) {
	if s.metadataErr != nil {
		return nil, s.metadataErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := map[string][]metadata.Metadata{}
	for name, ms := range s.meta {
		if metric == "" || metric == name {
			res[name] = ms
		}
	}
	return res, nil
}

// ChunkQuerier encodes the fake's samples with Prometheus's encoder, as a
// store without its own chunk encoding would.
func (s *fakeStore) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	q, err := s.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return encodingQuerier{q}, nil
}

type encodingQuerier struct{ storage.Querier }

func (q encodingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	return storage.NewSeriesSetToChunkSet(q.Querier.Select(ctx, sortSeries, hints, ms...))
}

func (s *fakeStore) Querier(mint, maxt int64) (storage.Querier, error) {
	if s.querierErr != nil {
		return nil, s.querierErr
	}
	return &fakeQuerier{s: s, mint: mint, maxt: maxt}, nil
}

// get returns a stored series by its labels string.
func (s *fakeStore) get(ls string) *fakeSeries {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.series[ls]
}

func (s *fakeStore) numSeries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.series)
}

// add stores samples directly, for read tests.
func (s *fakeStore) add(ls labels.Labels, samples ...fakeSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.series[ls.String()]
	if fs == nil {
		fs = &fakeSeries{ls: ls}
		s.series[ls.String()] = fs
	}
	fs.samples = append(fs.samples, samples...)
	slices.SortStableFunc(fs.samples, func(a, b fakeSample) int { return cmpInt64(a.t, b.t) })
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type fakeOp struct {
	ls   labels.Labels
	s    *fakeSample
	e    *exemplar.Exemplar
	name string
	md   *metadata.Metadata
}

type fakeAppender struct {
	s       *fakeStore
	ops     []fakeOp
	invalid map[string]bool
}

// Grow records the request size the handler announced.
func (a *fakeAppender) Grow(n int) {
	a.s.mu.Lock()
	a.s.grown = append(a.s.grown, n)
	a.s.mu.Unlock()
}

func (a *fakeAppender) check(ls labels.Labels) error {
	a.s.mu.Lock()
	a.s.appended++
	a.s.mu.Unlock()
	var err error
	if ls.Get(model.MetricNameLabel) == "" {
		err = fmt.Errorf("%w: %s", errInvalidSeries, ls)
	} else if a.s.appendErr != nil {
		err = a.s.appendErr(ls)
	}
	if err != nil {
		// Nothing of an invalid series is stored, including what was
		// appended before the error.
		a.invalid[ls.String()] = true
	}
	return err
}

// fakeTimeError is the fake's ItemError.
type fakeTimeError struct{ t int64 }

func (e fakeTimeError) Error() string      { return fmt.Sprintf("timestamp %d is out of range", e.t) }
func (fakeTimeError) Is(target error) bool { return target == storage.ErrOutOfBounds }
func (fakeTimeError) RefusesItemOnly()     {}

func (a *fakeAppender) checkTime(t int64) error {
	if a.s.minTime != nil && t < *a.s.minTime {
		return fakeTimeError{t}
	}
	return nil
}

// fakeUnknownRef is the fake's UnknownRefError.
type fakeUnknownRef struct{ ref SeriesRef }

func (e fakeUnknownRef) Error() string   { return fmt.Sprintf("unknown series ref %d", e.ref) }
func (fakeUnknownRef) UnknownSeriesRef() {}

// resolve returns the labels of the series ref or, when ref is 0 or
// unknown, ls, and the series' ref (0 for a series without a name, which
// check refuses).
func (a *fakeAppender) resolve(ref SeriesRef, ls labels.Labels) (labels.Labels, SeriesRef, error) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if ref != 0 {
		if !a.s.forgetRefs && int(ref) <= len(a.s.byRef) {
			return a.s.byRef[ref-1], ref, nil
		}
		if ls.IsEmpty() {
			return ls, 0, fakeUnknownRef{ref}
		}
	}
	a.s.refs++
	if ls.Get(model.MetricNameLabel) == "" {
		return ls, 0, nil
	}
	k := ls.String()
	if r, ok := a.s.refOf[k]; ok {
		return ls, r, nil
	}
	a.s.byRef = append(a.s.byRef, ls.Copy())
	ref = SeriesRef(len(a.s.byRef))
	a.s.refOf[k] = ref
	return ls, ref, nil
}

// series returns the labels and ref of the series ref or ls, checked.
func (a *fakeAppender) series(ref SeriesRef, ls labels.Labels) (labels.Labels, SeriesRef, error) {
	ls, ref, err := a.resolve(ref, ls)
	if err == nil {
		err = a.check(ls)
	}
	return ls, ref, err
}

func (a *fakeAppender) Append(ref SeriesRef, ls labels.Labels, t int64, v float64) (SeriesRef, error) {
	ls, ref, err := a.series(ref, ls)
	if err != nil {
		return 0, err
	}
	if err := a.checkTime(t); err != nil {
		return ref, err
	}
	a.ops = append(a.ops, fakeOp{ls: ls.Copy(), s: &fakeSample{t: t, f: v}})
	return ref, nil
}

func (a *fakeAppender) AppendHistogram(ref SeriesRef, ls labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (SeriesRef, error) {
	if (h == nil) == (fh == nil) {
		return 0, errors.New("exactly one of h, fh must be set")
	}
	// The real store validates histograms, before anything else.
	if err := validHistogram(h, fh); err != nil {
		return ref, fmt.Errorf("invalid native histogram at %d: %w", t, err)
	}
	ls, ref, err := a.series(ref, ls)
	if err != nil {
		return 0, err
	}
	if err := a.checkTime(t); err != nil {
		return ref, err
	}
	// Like the labels, the histogram is only valid during the call.
	if h != nil {
		h = h.Copy()
	} else {
		fh = fh.Copy()
	}
	a.ops = append(a.ops, fakeOp{ls: ls.Copy(), s: &fakeSample{t: t, h: h, fh: fh}})
	return ref, nil
}

func (a *fakeAppender) AppendExemplar(ref SeriesRef, ls labels.Labels, e exemplar.Exemplar) (SeriesRef, error) {
	ls, ref, err := a.series(ref, ls)
	if err != nil {
		return 0, err
	}
	if a.s.exemplarErr != nil {
		return ref, a.s.exemplarErr
	}
	if err := a.checkTime(e.Ts); err != nil {
		return ref, err
	}
	// The exemplar's labels, like ls, are only valid during the call.
	e.Labels = e.Labels.Copy()
	a.ops = append(a.ops, fakeOp{ls: ls.Copy(), e: &e})
	return ref, nil
}

func (a *fakeAppender) SetMetadata(family string, m metadata.Metadata) error {
	if family == "" {
		return errors.New("empty metric family name")
	}
	// Strings passed in are only valid during the call.
	m = metadata.Metadata{Type: m.Type, Help: strings.Clone(m.Help), Unit: strings.Clone(m.Unit)}
	a.ops = append(a.ops, fakeOp{name: strings.Clone(family), md: &m})
	return nil
}

func (a *fakeAppender) Commit(ctx context.Context) error {
	if g := a.s.commitGate; g != nil {
		a.s.reachGate()
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if a.s.commitErr != nil {
		return a.s.commitErr
	}
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	a.s.commits++
	for _, op := range a.ops {
		if op.md != nil {
			ms := a.s.meta[op.name]
			if !slices.Contains(ms, *op.md) {
				a.s.meta[op.name] = append(ms, *op.md)
			}
			continue
		}
		key := op.ls.String()
		if a.invalid[key] {
			continue
		}
		fs := a.s.series[key]
		if fs == nil {
			fs = &fakeSeries{ls: op.ls}
			a.s.series[key] = fs
		}
		if op.e != nil {
			fs.exemplars = append(fs.exemplars, *op.e)
			continue
		}
		// Idempotent like the real store: same series+timestamp → same cell.
		i, found := slices.BinarySearchFunc(fs.samples, op.s.t, func(s fakeSample, t int64) int { return cmpInt64(s.t, t) })
		if found {
			fs.samples[i] = *op.s
		} else {
			fs.samples = slices.Insert(fs.samples, i, *op.s)
		}
	}
	return nil
}

type fakeQuerier struct {
	s          *fakeStore
	mint, maxt int64
}

func (q *fakeQuerier) Select(ctx context.Context, sortSeries bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if g := q.s.selectGate; g != nil {
		q.s.reachGate()
		<-g
	}
	if err := ctx.Err(); err != nil {
		return storage.ErrSeriesSet(err)
	}
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	q.s.selects = append(q.s.selects, selectCall{sorted: sortSeries, matchers: ms})
	if q.s.selectErr != nil {
		return storage.ErrSeriesSet(q.s.selectErr)
	}
	var out []storage.Series
	for _, fs := range q.s.series {
		if !matchesAll(fs.ls, ms) {
			continue
		}
		var samples []chunks.Sample
		for _, s := range fs.samples {
			if s.t >= q.mint && s.t <= q.maxt {
				samples = append(samples, s)
			}
		}
		if len(samples) == 0 {
			continue
		}
		var series storage.Series = storage.NewListSeries(fs.ls, samples)
		if b := fakeBudgetOf(ctx); b != nil {
			series = budgetSeries{Series: series, b: b}
		}
		out = append(out, series)
	}
	if q.s.maxSeries > 0 && len(out) > q.s.maxSeries {
		return storage.ErrSeriesSet(storeerr.Invalid(fmt.Errorf("the query selects %d series, more than the limit of %d (--query.max-series)", len(out), q.s.maxSeries)))
	}
	if sortSeries {
		slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	}
	if q.s.unsorted {
		slices.Reverse(out)
	}
	return &listSeriesSet{series: out, i: -1}
}

// matchesAll applies matchers as Prometheus does: a missing label has value "".
func matchesAll(ls labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

func (*fakeQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (*fakeQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (*fakeQuerier) Close() error { return nil }

// listSeriesSet iterates a slice of series.
type listSeriesSet struct {
	series []storage.Series
	i      int
}

func (s *listSeriesSet) Next() bool                      { s.i++; return s.i < len(s.series) }
func (s *listSeriesSet) At() storage.Series              { return s.series[s.i] }
func (*listSeriesSet) Err() error                        { return nil }
func (*listSeriesSet) Warnings() annotations.Annotations { return nil }

// floatBits compares floats bit for bit, so NaN payloads (stale markers)
// count.
func floatBits(fs []float64) []uint64 {
	out := make([]uint64, len(fs))
	for i, f := range fs {
		out[i] = math.Float64bits(f)
	}
	return out
}

func validHistogram(h *histogram.Histogram, fh *histogram.FloatHistogram) error {
	if h != nil {
		return h.Validate()
	}
	return fh.Validate()
}

// fakeBudget is the fake store's sample budget, counted as its series are
// iterated, as kairosstore.WithSampleLimit's is counted as cells are read.
type fakeBudget struct {
	limit int64
	used  atomic.Int64
}

type fakeBudgetKey struct{}

func withFakeBudget(ctx context.Context, limit int) context.Context {
	return context.WithValue(ctx, fakeBudgetKey{}, &fakeBudget{limit: int64(limit)})
}

func fakeBudgetOf(ctx context.Context) *fakeBudget {
	b, _ := ctx.Value(fakeBudgetKey{}).(*fakeBudget)
	return b
}

type budgetSeries struct {
	storage.Series
	b *fakeBudget
}

func (s budgetSeries) Iterator(chunkenc.Iterator) chunkenc.Iterator {
	return &budgetIterator{Iterator: s.Series.Iterator(nil), b: s.b}
}

type budgetIterator struct {
	chunkenc.Iterator
	b   *fakeBudget
	err error
}

func (it *budgetIterator) Next() chunkenc.ValueType {
	if it.err != nil {
		return chunkenc.ValNone
	}
	vt := it.Iterator.Next()
	if vt != chunkenc.ValNone && it.b.used.Add(1) > it.b.limit {
		it.err = storeerr.ErrTooManySamples
		return chunkenc.ValNone
	}
	return vt
}

func (it *budgetIterator) Err() error {
	if it.err != nil {
		return it.err
	}
	return it.Iterator.Err()
}
