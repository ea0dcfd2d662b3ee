// Package translate maps Prometheus label sets to KairosDB metric names and
// tags and back, and turns label matchers into a KairosDB query plan. It is
// pure: no I/O.
package translate
