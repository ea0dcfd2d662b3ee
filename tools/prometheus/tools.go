//go:build tools

// Package tools pins the Prometheus server's main package so that `go mod tidy`
// keeps every module it needs in go.sum.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
