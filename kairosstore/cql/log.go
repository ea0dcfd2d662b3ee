package cql

import (
	"context"
	"log/slog"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// slogLogger adapts slog to the driver's StructuredLogger (modelled on the
// driver's gocqlzap adapter).
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Error(msg string, f ...gocql.LogField) { s.log(slog.LevelError, msg, f) }

func (s slogLogger) Warning(msg string, f ...gocql.LogField) { s.log(slog.LevelWarn, msg, f) }

func (s slogLogger) Info(msg string, f ...gocql.LogField) { s.log(slog.LevelInfo, msg, f) }

func (s slogLogger) Debug(msg string, f ...gocql.LogField) { s.log(slog.LevelDebug, msg, f) }

func (s slogLogger) log(level slog.Level, msg string, fields []gocql.LogField) {
	ctx := context.Background()
	if !s.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields))
	for _, f := range fields {
		attrs = append(attrs, slog.Any(f.Name, f.Value.Any()))
	}
	s.l.LogAttrs(ctx, level, msg, attrs...)
}
