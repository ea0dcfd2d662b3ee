package queryapi

import (
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/prometheus/util/annotations"
)

// Runtime is what the process tells of itself on /api/v1/status/runtimeinfo
// and /api/v1/status/flags.
type Runtime struct {
	// StartTime is when the process started; its configuration was read
	// then, once.
	StartTime time.Time
	// Retention is the samples' TTL as Prometheus's storageRetention
	// says it ("" if they are kept forever).
	Retention string
	// Flags are the flags' values in effect, by name.
	Flags map[string]string
}

// RuntimeInfo is Prometheus's /api/v1/status/runtimeinfo answer, field for
// field, so that clients of Prometheus read it; what the adapter does not
// have (config reloads, TSDB corruption) is its constant answer.
type RuntimeInfo struct {
	StartTime           time.Time `json:"startTime"`
	CWD                 string    `json:"CWD"`
	Hostname            string    `json:"hostname"`
	ServerTime          time.Time `json:"serverTime"`
	ReloadConfigSuccess bool      `json:"reloadConfigSuccess"`
	LastConfigTime      time.Time `json:"lastConfigTime"`
	CorruptionCount     int64     `json:"corruptionCount"`
	GoroutineCount      int       `json:"goroutineCount"`
	GOMAXPROCS          int       `json:"GOMAXPROCS"`
	GOMEMLIMIT          int64     `json:"GOMEMLIMIT"`
	GOGC                string    `json:"GOGC"`
	GODEBUG             string    `json:"GODEBUG"`
	StorageRetention    string    `json:"storageRetention"`
}

func (a *API) runtimeInfo(*http.Request) (any, annotations.Annotations, *apiError) {
	cwd, _ := os.Getwd()
	host, _ := os.Hostname()
	return RuntimeInfo{
		StartTime:           a.runtime.StartTime,
		CWD:                 cwd,
		Hostname:            host,
		ServerTime:          time.Now().UTC(),
		ReloadConfigSuccess: true,
		LastConfigTime:      a.runtime.StartTime,
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
		StorageRetention:    a.runtime.Retention,
	}, nil, nil
}

// flags answers as Prometheus's /api/v1/status/flags: each flag's value in
// effect by name.
func (a *API) flags(*http.Request) (any, annotations.Annotations, *apiError) {
	if a.runtime.Flags == nil {
		return map[string]string{}, nil, nil
	}
	return a.runtime.Flags, nil, nil
}
