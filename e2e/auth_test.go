package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// refusedRetries is how many failed connection attempts of an adapter that
// cannot connect the tests watch (its backoff is 1 s, 2 s, 4 s, ...).
const refusedRetries = 3

// TestCassandraPasswordAuth runs the adapter against a node with password
// authentication: with the right password it writes and reads; with a wrong
// one it stays up, not ready, answers writes 503 and keeps retrying; neither
// password ever shows in its log (at debug level) or on /metrics.
func TestCassandraPasswordAuth(t *testing.T) {
	node := startCassandraNode(t, nodeOptions{auth: true})

	// The default password equals the user name, which the log shows
	// anyway: give the superuser one that cannot appear by accident.
	password, wrong := "e2e-secret-"+randomHex(t), "e2e-wrong-"+randomHex(t)
	setSuperuserPassword(t, node.addr, password)
	dir := t.TempDir()
	passwordFile, wrongFile := filepath.Join(dir, "password"), filepath.Join(dir, "wrong")
	// A trailing newline, as editors write it, is not part of the password.
	require.NoError(t, os.WriteFile(passwordFile, []byte(password+"\n"), 0o600))
	require.NoError(t, os.WriteFile(wrongFile, []byte(wrong+"\n"), 0o600))
	args := func(file string) func(addr string) []string {
		return func(addr string) []string {
			return append(securityArgs(addr, node.addr, "e2e_auth"), "--cassandra.username=cassandra", "--cassandra.password-file="+file)
		}
	}

	p, addr := startServer(t, "adapter", adapterBin, "", args(passwordFile), adapterReadyTimeout)
	good := &adapter{process: p, addr: addr}
	requireWriteRead(t, good)

	bad := startRefused(t, "adapter-wrong-password", args(wrongFile))
	require.Contains(t, bad.out.String(), "password are incorrect", "the log says why it cannot connect")
	t.Logf("with a wrong password: /-/ready and writes 503 over %d attempts; it logs: %s",
		refusedRetries, lastLine(bad.out.String(), "Cannot connect to Cassandra yet"))

	for _, a := range []*adapter{good, bad} {
		status, metrics, err := httpGet(a.url("/metrics"))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
		for _, secret := range []string{password, wrong} {
			require.NotContains(t, a.out.String(), secret, "%s: a password in the log", a.name)
			require.NotContains(t, metrics, secret, "%s: a password on /metrics", a.name)
		}
	}
}

// TestCassandraTLS runs the adapter against a node that serves CQL only over
// TLS (Cassandra's PEMBasedSslContextFactory): with the node's CA it writes
// and reads; with another CA, or without TLS, it stays up, not ready, and
// answers writes 503 while it retries.
func TestCassandraTLS(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir)
	node := startCassandraNode(t, nodeOptions{tlsDir: dir})
	args := func(tlsArgs ...string) func(addr string) []string {
		return func(addr string) []string {
			return append(securityArgs(addr, node.addr, "e2e_tls"), tlsArgs...)
		}
	}

	p, addr := startServer(t, "adapter", adapterBin, "", args("--cassandra.tls.ca-file="+filepath.Join(dir, "ca.pem")), adapterReadyTimeout)
	requireWriteRead(t, &adapter{process: p, addr: addr})

	untrusted := startRefused(t, "adapter-other-ca", args("--cassandra.tls.ca-file="+filepath.Join(dir, "other-ca.pem")))
	require.Contains(t, untrusted.out.String(), "certificate signed by unknown authority", "the log says why it cannot connect")
	plain := startRefused(t, "adapter-without-tls", args())
	t.Logf("with another CA it logs: %s", lastLine(untrusted.out.String(), "Cannot connect to Cassandra yet"))
	t.Logf("without TLS it logs: %s", lastLine(plain.out.String(), "Cannot connect to Cassandra yet"))
}

// securityArgs is the adapter's command line for the private node at
// nodeAddr, with the driver's messages in the log.
func securityArgs(addr, nodeAddr, keyspace string) []string {
	return []string{
		"--web.listen-address=" + addr,
		// Debug, so that the driver's own messages are checked too.
		"--log.level=debug",
		"--storage=cassandra",
		"--cassandra.hosts=" + nodeAddr,
		"--cassandra.keyspace=" + keyspace,
		"--cassandra.write-consistency=ONE",
		"--cassandra.read-consistency=ONE",
	}
}

// requireWriteRead writes two small series in both protocols and reads
// them back in both response types.
func requireWriteRead(t *testing.T, a *adapter) {
	t.Helper()
	written := securitySeries()
	mustWrite(t, a, false, written[:1])
	mustWrite(t, a, true, written[1:])
	q := readQuery{Start: securityT0 - 1000, End: securityT0 + 10_000, Matchers: []*labels.Matcher{
		mustMatcher(labels.MatchRegexp, "__name__", "e2e_security_.*")}}
	for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
		require.Equal(t, sampleLines(written), sampleLines(remoteReadSeries(t, a, rt, q)[0]), "read back (%v)", rt)
	}
}

// startRefused starts an adapter that cannot connect to Cassandra and
// requires that it stays up and keeps retrying, while /-/ready says 503 and
// writes are answered 503 (so Prometheus retries them), right after the
// start and after refusedRetries attempts.
func startRefused(t *testing.T, name string, args func(addr string) []string) *adapter {
	t.Helper()
	// startServer would wait for a ready that never comes.
	addr := freeAddr(t)
	a := &adapter{process: startProcess(t, name+"@"+addr, adapterBin, args(addr)...), addr: addr}
	require.True(t, waitListening(t, a.process, addr), "%s is taken", addr)
	requireRefusing(t, a, "right after the start")
	deadline := time.Now().Add(time.Minute)
	for strings.Count(a.out.String(), "Cannot connect to Cassandra yet") < refusedRetries {
		require.False(t, a.exited(), "%s exited instead of retrying; output:\n%s", name, a.out.String())
		require.True(t, time.Now().Before(deadline), "%s did not retry %d times within a minute; output:\n%s", name, refusedRetries, a.out.String())
		time.Sleep(200 * time.Millisecond)
	}
	requireRefusing(t, a, "after retrying")
	return a
}

func requireRefusing(t *testing.T, a *adapter, when string) {
	t.Helper()
	status, body, err := httpGet(a.url("/-/ready"))
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s: /-/ready %s: %s", a.name, when, body)
	for _, v2 := range []bool{false, true} {
		res := remoteWrite(t, a, v2, securitySeries())
		require.Equal(t, http.StatusServiceUnavailable, res.Status, "%s: write (v2=%v) %s: %s", a.name, v2, when, res.Body)
	}
}

// setSuperuserPassword changes the password of the superuser cassandra
// (whose password is "cassandra" on a fresh node) and waits until the node
// accepts the new one: it caches credentials for up to 2 s.
func setSuperuserPassword(t *testing.T, addr, password string) {
	t.Helper()
	cfg := cassandratest.Cluster(addr, "")
	cfg.Authenticator = gocql.PasswordAuthenticator{Username: "cassandra", Password: "cassandra"}
	s, err := cfg.CreateSession()
	require.NoError(t, err, "log in as cassandra/cassandra")
	defer s.Close()
	// Role statements take no bind markers; the password is [a-z0-9-]
	// only, so quoting it is safe.
	require.NoError(t, s.Query("ALTER ROLE cassandra WITH PASSWORD = '"+password+"'").Exec())

	cfg.Authenticator = gocql.PasswordAuthenticator{Username: "cassandra", Password: password}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s2, err := cfg.CreateSession()
		if err == nil {
			s2.Close()
			return
		}
		require.True(t, time.Now().Before(deadline), "the new password was not accepted within 30 s: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
}

// writeTestPKI writes what the TLS node and the adapters need into dir:
// node.pem (the node's private key and certificate for 127.0.0.1, signed by
// the test CA), ca.pem (the test CA) and other-ca.pem (an unrelated CA).
func writeTestPKI(t *testing.T, dir string) {
	t.Helper()
	caCert, caKey := newCert(t, "e2e test CA", nil, nil)
	nodeCert, nodeKey := newCert(t, "127.0.0.1", caCert, caKey)
	otherCA, _ := newCert(t, "e2e unrelated CA", nil, nil)
	keyDER, err := x509.MarshalPKCS8PrivateKey(nodeKey)
	require.NoError(t, err)
	// Cassandra reads an unencrypted PKCS#8 key followed by the chain.
	nodePEM := append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), certPEM(nodeCert)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node.pem"), nodePEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), certPEM(caCert), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other-ca.pem"), certPEM(otherCA), 0o644))
}

// newCert makes a certificate valid for a day: a self-signed CA when parent
// is nil, else a server certificate for the IP address name signed by parent.
func newCert(t *testing.T, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.IPAddresses = []net.IP{net.ParseIP(name)}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// securityT0 is the time of the first sample of securitySeries.
var securityT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixMilli()

// securitySeries returns two small series.
func securitySeries() []series {
	var out []series
	for i, name := range []string{"e2e_security_a", "e2e_security_b"} {
		s := series{Labels: labels.FromStrings("__name__", name, "job", "e2e")}
		for j := range 5 {
			s.Samples = append(s.Samples, sample{T: securityT0 + int64(j)*1000, Bits: math.Float64bits(float64(i*10+j) + 0.5)})
		}
		out = append(out, s)
	}
	return out
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// lastLine returns the last line of out that contains substr.
func lastLine(out, substr string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}
