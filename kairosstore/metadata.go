package kairosstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"
)

// Metadata reads the stored metadata of one metric family, or of all of them
// when metric is empty, at most limit families (0 = no limit).
func (s *Store) Metadata(ctx context.Context, metric string, limit int) (map[string][]metadata.Metadata, error) {
	var families []string
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
		if err != nil && err != errStop {
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

// metadataCache remembers the metadata stored per family. Senders repeat
// it with every request (2.0 with every series), so an unchanged entry
// costs one map lookup instead of a JSON encoding and a write.
type metadataCache struct {
	mu sync.Mutex
	m  map[string]metadata.Metadata
}

// maxCachedFamilies bounds the cache; past it, it starts over.
const maxCachedFamilies = 4096

func (c *metadataCache) stored(family string, md metadata.Metadata) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.m[family]
	return ok && prev == md
}

func (c *metadataCache) add(family string, md metadata.Metadata) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedFamilies {
		c.m = map[string]metadata.Metadata{}
	}
	c.m[family] = md
}
