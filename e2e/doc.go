// Package e2e holds the adapter's black-box tests: they build the adapter
// binary, run it (and, when available, real Prometheus servers) as separate
// processes on loopback ports, and talk to it only over HTTP, as Prometheus
// does. Everything is in _test.go files; this file only names the package.
//
// Environment (see scripts/test.sh):
//   - KAIROS_TEST_CASSANDRA=host:port enables the Cassandra-backed subtests.
//   - KAIROS_TEST_PROMETHEUS=/path/to/prometheus enables the tests that run a
//     real Prometheus (TestPrometheusEndToEnd, TestCassandraOutage).
//   - JDK 17 (scripts/cassandra.sh check) lets the outage, authentication and
//     TLS tests start private Cassandra nodes of their own.
//
// Without them those tests skip with a message; under CI=true they fail.
package e2e
