package kairosstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"
)

// Metadata reads the stored metadata of one metric family, or of all of them
// when metric is empty, at most limit families (0 = no limit).
func (s *Store) Metadata(ctx context.Context, metric string, limit int) (map[string][]metadata.Metadata, error) {
	var families []string
	if !utf8.ValidString(metric) {
		// No family has such a name (writes refuse it), and Cassandra
		// refuses it as a key: nothing, as Prometheus answers.
		return map[string][]metadata.Metadata{}, nil
	}
	if metric != "" {
		families = []string{metric}
	} else {
		err := s.eng.ServiceKeys(ctx, metadataService, metadataServiceKey, "", func(key string) error {
			if limit > 0 && len(families) >= limit {
				return errStop
			}
			families = append(families, key)
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return nil, fmt.Errorf("list metadata: %w", err)
		}
	}
	out := make(map[string][]metadata.Metadata, len(families))
	for _, f := range families {
		v, ok, err := s.eng.ServiceValue(ctx, metadataService, metadataServiceKey, f)
		if err != nil {
			return nil, fmt.Errorf("read metadata of %s: %w", f, err)
		}
		if !ok {
			continue
		}
		var m storedMetadata
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			s.log.Warn("Skipping unreadable metadata", "family", f, "err", err)
			continue
		}
		out[f] = []metadata.Metadata{{Type: model.MetricType(m.Type), Help: m.Help, Unit: m.Unit}}
	}
	return out, nil
}

// maxCachedFamilies bounds Store.meta, which remembers the metadata stored
// per family: senders repeat it with every request (2.0 with every series),
// so an unchanged entry costs one map lookup instead of a JSON encoding and
// a write.
const maxCachedFamilies = 4096
