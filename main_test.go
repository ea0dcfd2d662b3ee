package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"golang.org/x/crypto/bcrypt"
)

// TestWebTLSAndBasicAuth runs the program with a web config file enabling
// TLS and basic auth: only HTTPS with the right password gets through, and
// the password shows neither in the log nor on /metrics.
func TestWebTLSAndBasicAuth(t *testing.T) {
	const (
		user      = "prometheus"
		password  = "pw-7c1e94b2-correct"
		wrongPass = "pw-0d5f3a88-wrong"
	)
	dir := t.TempDir()
	certPEM := writeSelfSignedCert(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	require.NoError(t, err)
	webConfig := filepath.Join(dir, "web.yml")
	require.NoError(t, os.WriteFile(webConfig, fmt.Appendf(nil,
		"tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n",
		filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), user, hash), 0o600))

	p := startRun(t, "--storage=embedded", "--storage.path="+filepath.Join(dir, "data"), "--web.config.file="+webConfig)

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(certPEM))
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
	}
	get := func(path, user, pass string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "https://"+p.addr+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	status, body := get("/-/healthy", user, password)
	require.Equal(t, http.StatusOK, status, body)
	status, _ = get("/-/healthy", user, wrongPass)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = get("/-/healthy", "", "")
	require.Equal(t, http.StatusUnauthorized, status, "no credentials")
	status, _ = get("/-/healthy", "nobody", password)
	require.Equal(t, http.StatusUnauthorized, status, "unknown user")

	// Plain HTTP to the TLS port: Go's TLS server answers 400 "client
	// sent an HTTP request to an HTTPS server" or drops the connection;
	// either way nothing is served.
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + p.addr + "/-/healthy"); err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP must not be served")
	}

	status, metrics := get("/metrics", user, password)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, metrics, "kairos_adapter_", "the adapter's own metrics are served")
	require.NotContains(t, metrics, password)
	require.NotContains(t, metrics, string(hash))

	log := p.stop(t)
	require.Contains(t, log, "TLS is enabled.")
	for _, secret := range []string{password, wrongPass, string(hash)} {
		require.NotContains(t, log, secret, "the log shows a secret")
	}
}

// TestCassandraPasswordNotLogged starts the program against a Cassandra
// address where nothing listens, so it logs connection retries, and checks
// that the password from --cassandra.password-file is in neither the log nor
// /metrics.
func TestCassandraPasswordNotLogged(t *testing.T) {
	const password = "cassandra-pw-4b9e61d0"
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(password+"\n"), 0o600))

	// Port 1 on loopback refuses connections at once.
	p := startRun(t, "--storage=cassandra", "--cassandra.hosts=127.0.0.1:1",
		"--cassandra.username=kairos", "--cassandra.password-file="+pwFile,
		"--cassandra.connect-timeout=1s", "--cassandra.timeout=1s")
	require.Eventually(t, func() bool {
		return strings.Count(p.log.String(), "Cannot connect to Cassandra yet; retrying") >= 2
	}, 30*time.Second, 50*time.Millisecond, "no connection retries logged:\n%s", p.log)

	status, body := plainGet(t, "http://"+p.addr+"/-/ready")
	require.Equal(t, http.StatusServiceUnavailable, status, "not ready while Cassandra is away")
	require.NotContains(t, body, password)
	status, metrics := plainGet(t, "http://"+p.addr+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, metrics, password)

	log := p.stop(t)
	require.Contains(t, log, "TLS is disabled.", "no web config file means plain HTTP")
	require.NotContains(t, log, password)
}

// TestInvalidWebConfigFile checks that a broken web config file stops the
// program at start, before any store opens.
func TestInvalidWebConfigFile(t *testing.T) {
	dir := t.TempDir()
	webConfig := filepath.Join(dir, "web.yml")
	require.NoError(t, os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: /nonexistent.key\n"), 0o600))
	var log syncBuffer
	code := run(t.Context(), []string{"--storage.path=" + filepath.Join(dir, "data"), "--web.config.file=" + webConfig, "--web.listen-address=127.0.0.1:0"}, &log)
	require.Equal(t, 1, code, log.String())
	require.Contains(t, log.String(), "Invalid --web.config.file")
	require.NoDirExists(t, filepath.Join(dir, "data"), "the store must not open")
}

// running is run() in a goroutine, with its log.
type running struct {
	addr   string
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	code   int           // run's result, once done is closed
}

// startRun runs the program with args plus a loopback port of its own
// choosing and a JSON debug log, and waits until it listens. The address
// comes from exporter-toolkit's "Listening on" log line, so no port is
// guessed.
func startRun(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	p := &running{log: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	args = append(args, "--web.listen-address=127.0.0.1:0", "--log.format=json", "--log.level=debug")
	go func() {
		defer close(p.done)
		p.code = run(ctx, args, p.log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(time.Minute):
		}
	})
	require.Eventually(t, func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		p.addr = listenAddress(p.log.String())
		return p.addr != ""
	}, 30*time.Second, 20*time.Millisecond)
	require.NotEmpty(t, p.addr, "the program exited without listening:\n%s", p.log)
	return p
}

// stop ends the program as SIGTERM would, checks that it shut down cleanly
// and returns its log.
func (p *running) stop(t *testing.T) string {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
		require.Equal(t, 0, p.code, "exit code; log:\n%s", p.log)
	case <-time.After(time.Minute):
		t.Fatalf("no graceful shutdown within a minute; log:\n%s", p.log)
	}
	log := p.log.String()
	require.Contains(t, log, "Shutting down")
	return log
}

// listenAddress finds the address of exporter-toolkit's "Listening on" line
// in a JSON log.
func listenAddress(log string) string {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct{ Msg, Address string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "Listening on" {
			return line.Address
		}
	}
	return ""
}

func plainGet(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// writeSelfSignedCert writes cert.pem and key.pem for 127.0.0.1 into dir and
// returns the certificate PEM.
func writeSelfSignedCert(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kairos-adapter test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certPEM
}

// syncBuffer is a bytes.Buffer safe for the program's goroutines to write
// while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCassandraSpecContradictionExits: a keyspace whose spec table
// contradicts the configured row width stops the program with status 1
// (docs/kairosdb-layout.md §3.3), rather than serving a store that would write
// unreadable columns.
func TestCassandraSpecContradictionExits(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	session := cassandratest.Session(t, keyspace)
	cassandratest.Exec(t, session,
		`CREATE TABLE IF NOT EXISTS spec ( spec_type text, name text, value text, PRIMARY KEY ((spec_type), name))`,
		`INSERT INTO spec (spec_type, name, value) VALUES ('cluster_config', 'row_time_unit', 'MILLISECONDS')`,
		`INSERT INTO spec (spec_type, name, value) VALUES ('cluster_config', 'row_width', '3600000')`,
	)
	var log syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	code := run(ctx, []string{"--storage=cassandra", "--cassandra.hosts=" + addr, "--cassandra.keyspace=" + keyspace,
		"--cassandra.write-consistency=ONE", "--web.listen-address=127.0.0.1:0"}, &log)
	require.Equal(t, 1, code, log.String())
	require.NoError(t, ctx.Err(), "the program must stop by itself")
	require.Contains(t, log.String(), "set --kairosdb.row-time-unit=MILLISECONDS and --kairosdb.row-width=1h0m0s")
}

// TestHeaderTricklingBoundedByReadTimeout sends half a request line and then
// nothing: with --web.read-timeout=1s the server must close the connection
// after about a second, not hold it for a fixed longer header timeout. The
// client waits up to 8 s, so only a server that ignores the read timeout
// (the old fixed 10 s) fails.
func TestHeaderTricklingBoundedByReadTimeout(t *testing.T) {
	p := startRun(t, "--storage=embedded", "--storage.path="+filepath.Join(t.TempDir(), "data"), "--web.read-timeout=1s")
	conn, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /-/healthy HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(8*time.Second)))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server still held the connection 8 s after the 1 s read timeout")
	}
	p.stop(t)
}

// TestRunLeavesNoGoroutines runs the program against a Cassandra node that
// opens at once, until it is ready, and stops it: no goroutine of run may
// outlive it. (A waiter for a failed open used to block forever when the
// open succeeded, once per run.)
func TestRunLeavesNoGoroutines(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	p := startRun(t, "--storage=cassandra", "--cassandra.hosts="+addr, "--cassandra.keyspace="+keyspace,
		"--cassandra.write-consistency=ONE")
	client := &http.Client{Timeout: 10 * time.Second}
	require.Eventually(t, func() bool {
		resp, err := client.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 2*time.Minute, 100*time.Millisecond, "never ready:\n%s", p.log)
	p.stop(t)
	// run has returned; goroutines it ended may still be unwinding.
	if !assert.Eventually(t, func() bool { return runGoroutines() == "" }, 10*time.Second, 20*time.Millisecond) {
		t.Fatalf("goroutines of run left after it returned:\n%s", runGoroutines())
	}
}

// runGoroutines returns the stacks of the goroutines that are inside a
// function literal of run.
func runGoroutines() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kairos-adapter.run.func") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// TestRollupSettingsRefusedAtStart: raw samples that could expire before
// they are rolled up, and rollups that expire before raw samples, stop the
// adapter before any store opens, with a message naming the flags.
func TestRollupSettingsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kairosdb.datapoint-ttl=1d"}, "raw samples live 1d (--kairosdb.datapoint-ttl), less than the largest rollup resolution (6h) plus --rollup.delay (10m) plus a margin of 1d"},
		{[]string{"--kairosdb.datapoint-ttl=30d", "--rollup.retention=5m=7d"}, "--rollup.retention keeps 5m rollups 1w, less than raw samples live (30d"},
	} {
		dir := t.TempDir()
		var log syncBuffer
		code := run(t.Context(), append([]string{"--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:0"}, tc.args...), &log)
		require.Equal(t, 1, code, log.String())
		require.Contains(t, log.String(), "Invalid rollup configuration")
		require.Contains(t, log.String(), tc.want)
		require.NoDirExists(t, filepath.Join(dir, "data"), "the store must not open")
	}
	// Turned off, nothing is checked.
	dir := t.TempDir()
	var log syncBuffer
	r := run(t.Context(), []string{"--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=x:y:z", "--kairosdb.datapoint-ttl=1d", "--rollup.resolutions="}, &log)
	require.NotContains(t, log.String(), "rollup", "code %d", r)
}

// TestCassandraRefusedTTLExits: a TTL the node refuses (expiries past
// 2038-01-19 on the test node, Cassandra 5.0 in its default
// storage_compatibility_mode) stops the program with status 1 and
// Cassandra's reason, where it used to serve and answer every write with a
// 5xx that Prometheus retries for ever. A rollup retention is checked as the
// data TTL is.
func TestCassandraRefusedTTLExits(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	for _, flags := range [][]string{{"--kairosdb.datapoint-ttl=15y"}, {"--kairosdb.datapoint-ttl=1y", "--rollup.retention=1h=15y"}} {
		var log syncBuffer
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		code := run(ctx, append([]string{"--storage=cassandra", "--cassandra.hosts=" + addr, "--cassandra.keyspace=" + keyspace,
			"--cassandra.write-consistency=ONE", "--web.listen-address=127.0.0.1:0"}, flags...), &log)
		require.Equal(t, 1, code, log.String())
		require.NoError(t, ctx.Err(), "the program must stop by itself")
		cancel()
		require.Contains(t, log.String(), "the longest TTL the adapter would write", flags)
		require.Contains(t, log.String(), "2038-01-19", flags)
	}
}
