package cassandratest_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// TestCassandraWriteReadRow writes a row with an explicit write timestamp
// through the gocql driver into a per-test keyspace on the real node and reads
// back the value and its WRITETIME.
func TestCassandraWriteReadRow(t *testing.T) {
	t.Parallel()
	_, ks := cassandratest.Keyspace(t)
	s := cassandratest.Session(t, ks)

	var version string
	if err := s.Query("SELECT release_version FROM system.local").Scan(&version); err != nil {
		t.Fatalf("select release_version: %v", err)
	}
	t.Logf("Cassandra %s, keyspace %s", version, ks)

	cassandratest.Exec(t, s, `CREATE TABLE kv (k text PRIMARY KEY, v blob)`)

	const ts = int64(1_700_000_000_123_456) // microseconds, as KairosDB writes them
	want := []byte{0x00, 0x01, 0xfe, 0xff}
	if err := s.Query(`INSERT INTO kv (k, v) VALUES (?, ?) USING TIMESTAMP ?`, "row1", want, ts).Exec(); err != nil {
		t.Fatalf("insert: %v", err)
	}

	var got []byte
	var wt int64
	if err := s.Query(`SELECT v, WRITETIME(v) FROM kv WHERE k = ?`, "row1").Scan(&got, &wt); err != nil {
		t.Fatalf("select: %v", err)
	}
	if string(got) != string(want) {
		t.Errorf("v = %x, want %x", got, want)
	}
	if wt != ts {
		t.Errorf("WRITETIME(v) = %d, want %d", wt, ts)
	}

	// A write with an older timestamp must lose to the newer one.
	if err := s.Query(`INSERT INTO kv (k, v) VALUES (?, ?) USING TIMESTAMP ?`, "row1", []byte("old"), ts-1).Exec(); err != nil {
		t.Fatalf("insert older: %v", err)
	}
	if err := s.Query(`SELECT v, WRITETIME(v) FROM kv WHERE k = ?`, "row1").Scan(&got, &wt); err != nil {
		t.Fatalf("select again: %v", err)
	}
	if string(got) != string(want) || wt != ts {
		t.Errorf("after older write: v = %x at %d, want %x at %d", got, wt, want, ts)
	}
}

// TestKeyspaceParallel creates keyspaces from several parallel tests at once,
// each with a table and a row, checking that they are isolated.
func TestKeyspaceParallel(t *testing.T) {
	t.Parallel()
	for i := 0; i < 4; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			_, ks := cassandratest.Keyspace(t)
			s := cassandratest.Session(t, ks)
			cassandratest.Exec(t, s, `CREATE TABLE n (id int PRIMARY KEY, ks text)`)
			if err := s.Query(`INSERT INTO n (id, ks) VALUES (1, ?)`, ks).Exec(); err != nil {
				t.Fatalf("insert: %v", err)
			}
			var count int
			var got string
			if err := s.Query(`SELECT COUNT(*) FROM n`).Scan(&count); err != nil {
				t.Fatalf("count: %v", err)
			}
			if err := s.Query(`SELECT ks FROM n WHERE id = 1`).Scan(&got); err != nil {
				t.Fatalf("select: %v", err)
			}
			if count != 1 || got != ks {
				t.Errorf("keyspace %s holds %d rows, ks=%q", ks, count, got)
			}
		})
	}
}

// TestKeyspaceDropped checks that the keyspace of a finished subtest is gone.
func TestKeyspaceDropped(t *testing.T) {
	t.Parallel()
	var ks string
	t.Run("sub", func(t *testing.T) {
		_, ks = cassandratest.Keyspace(t)
	})
	if ks == "" {
		cassandratest.SkipUnlessCI(t, "subtest did not create a keyspace")
	}
	s := cassandratest.Session(t, "")
	var n int
	if err := s.Query(`SELECT COUNT(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, ks).Scan(&n); err != nil {
		t.Fatalf("query: %v", err)
	}
	if n != 0 {
		t.Errorf("keyspace %s still exists after its test ended", ks)
	}
}

var validKeyspace = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func TestKeyspaceName(t *testing.T) {
	for _, name := range []string{
		"TestFoo",
		"TestFoo/sub_test#01",
		"Test/with spaces/and-ÜNICODE/√",
		strings.Repeat("TestVeryLongName", 10),
		"",
		"___",
	} {
		a, b := cassandratest.KeyspaceName(name), cassandratest.KeyspaceName(name)
		for _, ks := range []string{a, b} {
			if len(ks) > cassandratest.MaxKeyspaceLen || !validKeyspace.MatchString(ks) {
				t.Errorf("KeyspaceName(%q) = %q: invalid", name, ks)
			}
		}
		if a == b {
			t.Errorf("KeyspaceName(%q) returned %q twice", name, a)
		}
	}
	if got := cassandratest.KeyspaceName("TestFoo/Bar"); !strings.HasPrefix(got, "t_testfoo_bar_") {
		t.Errorf("KeyspaceName(TestFoo/Bar) = %q, want prefix t_testfoo_bar_", got)
	}
}

// TestKeyspaceUnreachable runs the helper against a port where nothing
// listens, outside CI; it must skip, never fail.
func TestKeyspaceUnreachable(t *testing.T) {
	t.Setenv(cassandratest.EnvAddr, "127.0.0.1:1")
	t.Setenv("CI", "")
	done := make(chan bool)
	var skipped bool
	go func() {
		defer close(done)
		ft := &fakeTB{TB: t}
		defer func() {
			recover()
			skipped = ft.skipped && !ft.failed
		}()
		cassandratest.Addr(ft)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Addr hung")
	}
	if !skipped {
		t.Error("Addr did not skip on an unreachable node")
	}
}

type fakeTB struct {
	testing.TB
	skipped, failed bool
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(string, ...any) {
	f.skipped = true
	panic("skip")
}
func (f *fakeTB) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}
