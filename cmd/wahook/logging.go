package main

import (
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the process logger writing to w: JSON or console, sampled
// so that a failing hot path cannot flood the log.
func newLogger(o logOptions, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(o.level)
	if err != nil {
		return nil, fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch o.format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("%w: --log-format %q: use json or console", errUsage, o.format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	core = zapcore.NewSamplerWithOptions(core, time.Second, 20, 200)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}

// commandLogger builds the logger of a subcommand whose flags are parsed and
// valid. With --check it reports the configuration valid and returns a nil
// logger: the caller returns at once.
func commandLogger(f *flags, o logOptions, stdout, stderr io.Writer) (*zap.Logger, error) {
	log, err := newLogger(o, stderr)
	if err != nil {
		return nil, err
	}
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil, nil
	}
	return log, nil
}
