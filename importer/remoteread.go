package importer

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// RemoteRead names a remote-read endpoint to import from.
type RemoteRead struct {
	URL string
	// Slice is the time range of one request and one progress mark.
	Slice time.Duration
	// Timeout bounds one request, the streaming of its answer included.
	Timeout time.Duration

	samplesOnly bool // ask for SAMPLES only (tests of that answer)
}

// ImportRemoteRead imports [o.Start, o.End] from a remote-read endpoint,
// slice by slice (Slices), with Prometheus's own remote-read client: it
// asks for streamed XOR chunks first and takes sampled answers from servers
// that only have those. A slice is recorded once all its samples are
// stored; a rerun skips the slices recorded.
func ImportRemoteRead(ctx context.Context, st *kairosstore.Store, src RemoteRead, o Options, log *slog.Logger) (Summary, error) {
	var sum Summary
	log = orDiscard(log)
	u, err := url.Parse(src.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return sum, fmt.Errorf("--url %q is not an http(s) URL of a remote-read endpoint, such as http://prometheus:9090/api/v1/read", src.URL)
	}
	if src.Timeout <= 0 {
		return sum, fmt.Errorf("the request timeout %s must be positive", src.Timeout)
	}
	n, slice, err := Slices(o.Start, o.End, src.Slice)
	if err != nil {
		return sum, err
	}
	client := &readClient{url: u.String(), client: &http.Client{Timeout: src.Timeout}, samplesOnly: src.samplesOnly}
	o.Progress.Plan(n, 0)
	mk := marks{st: st, key: o.sourceKey("remote-read", u.Redacted())}
	w := newWriter(st, &o, log)
	defer w.abort()
	sels := o.selectors()
	for i := range n {
		span := slice(i)
		key := fmt.Sprintf("slice/%d/%d", span.Start, span.End)
		done, err := mk.done(ctx, key)
		if err != nil {
			return sum, err
		}
		if done {
			sum.Skipped++
			o.Progress.UnitDone(true)
			continue
		}
		v, err := withRetries(ctx, &o, log, key, func() (markValue, error) {
			return importSet(ctx, w, &readQuerier{ctx: ctx, client: client, span: span}, sels, span)
		})
		if err != nil {
			return sum, fmt.Errorf("remote read from %s of %s to %s: %w", u.Redacted(), fmtMillis(span.Start), fmtMillis(span.End), err)
		}
		if err := mk.set(ctx, key, v); err != nil {
			return sum, err
		}
		sum.add(v)
		o.Progress.UnitDone(false)
		log.Debug("Slice imported", "start", fmtMillis(span.Start), "end", fmtMillis(span.End), "series", v.Series, "samples", v.Samples)
	}
	return sum, nil
}

// readQuerier is one slice of a remote-read endpoint as a storage.Querier,
// one request per selector.
type readQuerier struct {
	storage.LabelQuerier
	ctx    context.Context
	client *readClient
	span   Span
}

func (q *readQuerier) Select(_ context.Context, sorted bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	pms := make([]*prompb.LabelMatcher, 0, len(ms))
	for _, m := range ms {
		pms = append(pms, &prompb.LabelMatcher{Type: prompb.LabelMatcher_Type(m.Type), Name: m.Name, Value: m.Value})
	}
	// Remote read answers series sorted by labels (Prometheus's client
	// relies on it too), which merging selectors needs.
	_ = sorted
	return q.client.read(q.ctx, &prompb.Query{
		StartTimestampMs: q.span.Start, EndTimestampMs: q.span.End, Matchers: pms,
		Hints: &prompb.ReadHints{StartMs: hints.Start, EndMs: hints.End},
	})
}

func (q *readQuerier) Close() error { return nil }
