package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// A service (serve, process) is a list of parts, started in order and
// stopped in the reverse order, each step logged with its duration: so the
// part that takes work in (the webhook endpoint) starts last and stops
// first, and the bus the others use stops last.

// part is one part of a service.
type part struct {
	// name says what its stop achieves: the shutdown step's name in the log.
	name string
	// stop stops the part and returns once it has (its last batch
	// written, its requests answered).
	stop func() error
	// done, when set, is closed if the part ends by itself (a failure);
	// err then tells why.
	done <-chan struct{}
	err  func() error
}

// parts are the started parts of a service, in the order they started.
type parts struct {
	log  *zap.Logger
	list []part
}

// add records a started part.
func (p *parts) add(pt part) {
	p.list = append(p.list, pt)
	p.log.Debug("started", zap.String("part", pt.name))
}

// wait returns when ctx ends (nil) or when a part ends by itself (its
// error, logged).
func (p *parts) wait(ctx context.Context) error {
	ended := make(chan part, len(p.list))
	quit := make(chan struct{})
	defer close(quit)
	for _, pt := range p.list {
		if pt.done == nil {
			continue
		}
		go func(pt part) {
			select {
			case <-pt.done:
				ended <- pt
			case <-quit:
			}
		}(pt)
	}
	select {
	case <-ctx.Done():
		p.log.Info("shutting down")
		return nil
	case pt := <-ended:
		err := pt.err()
		p.log.Error("stopped by itself, shutting down", zap.String("part", pt.name), zap.Error(err))
		return err
	}
}

// stop stops every part in the reverse order of their start, each step
// logged with its duration. A step that fails does not keep the next ones
// from running; the error names every failed step.
func (p *parts) stop() error {
	var errs []error
	for i := len(p.list) - 1; i >= 0; i-- {
		pt := p.list[i]
		start := time.Now()
		if err := pt.stop(); err != nil {
			p.log.Error("shutdown step failed", zap.String("step", pt.name), zap.Error(err), zap.Duration("took", time.Since(start)))
			errs = append(errs, fmt.Errorf("shutdown step %q failed: %w", pt.name, err))
			continue
		}
		p.log.Info("shutdown step done", zap.String("step", pt.name), zap.Duration("took", time.Since(start)))
	}
	p.list = nil
	return errors.Join(errs...)
}

// stopInto stops the parts (deferred by a command) and, when the command
// itself ended well, makes a failed step its error: a stop that did not
// finish (a last batch not written, a drain cut short) exits non-zero, so
// that whoever restarts the service sees it. A command that already
// failed keeps its own error; the steps are in the log.
func (p *parts) stopInto(err *error) {
	if e := p.stop(); e != nil && *err == nil {
		*err = e
	}
}

// task is a goroutine whose end can be waited for any number of times.
type task struct {
	done chan struct{}
	err  error
}

// goTask runs f in a goroutine.
func goTask(f func() error) *task {
	t := &task{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.err = f()
	}()
	return t
}

// wait returns f's error once it has returned.
func (t *task) wait() error {
	<-t.done
	return t.err
}

// stageTask runs a stage (runStage1, runStage2: they report on a channel
// when they return) until its own context is cancelled, as a part.
func stageTask(name string, run func(ctx context.Context, done chan<- error)) part {
	ctx, cancel := context.WithCancel(context.Background())
	t := goTask(func() error {
		done := make(chan error, 1)
		run(ctx, done)
		return <-done
	})
	// A stage stopped before it was set up (waiting for ClickHouse, for the
	// migrations lease) ends with the cancellation: that is its stop, not a
	// failure of it.
	stop := func() error {
		cancel()
		if err := t.wait(); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	return part{name: name, done: t.done, err: t.wait, stop: stop}
}
