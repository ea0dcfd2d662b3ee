package kairosstore

import "context"

// Values of service_index (§9.2) for the adapter's own services (the rollup
// job's progress, lease and recomputation marks). The caller gives the write
// time (ms): the newest write wins, and the rollup job deletes a mark as of
// the time it was written.

// ServiceValue reads service_index(service, serviceKey, key).
func (s *Store) ServiceValue(ctx context.Context, service, serviceKey, key string) (string, bool, error) {
	return s.eng.ServiceValue(ctx, service, serviceKey, key)
}

// SetServiceValue writes service_index(service, serviceKey, key) = value.
func (s *Store) SetServiceValue(ctx context.Context, service, serviceKey, key, value string, writeTime int64) error {
	return s.eng.SetServiceValue(ctx, service, serviceKey, key, value, writeTime)
}

// DeleteServiceValue removes service_index(service, serviceKey, key) as of
// writeTime: a write of the key stamped later survives it.
func (s *Store) DeleteServiceValue(ctx context.Context, service, serviceKey, key string, writeTime int64) error {
	return s.eng.DeleteServiceValue(ctx, service, serviceKey, key, writeTime)
}

// ServiceKeys lists the keys of (service, serviceKey) that start with
// prefix, ascending.
func (s *Store) ServiceKeys(ctx context.Context, service, serviceKey, prefix string, fn func(key string) error) error {
	return s.eng.ServiceKeys(ctx, service, serviceKey, prefix, fn)
}
