// Package codec holds KairosDB's byte formats and nothing else: row keys,
// data_points column names, the row spec that maps timestamps to rows and
// columns, sample values (double, long, string, legacy), the native
// histogram and exemplar values, the tag collection hash (murmur3) and
// Java's string order. Its functions are pure: no I/O, no state, so the
// store, the engines' tests and the load generator share one definition of
// every byte. Section numbers (§n) in its comments are those of
// docs/kairosdb-layout.md.
package codec
