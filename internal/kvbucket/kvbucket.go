// Package kvbucket opens the JetStream KV buckets that wahook's parts make
// on first use.
package kvbucket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Ensure opens a bucket, or creates it with cfg when it is absent. An
// existing bucket is left as it is (wahook migrate updates them); when
// another instance creates it at the same moment, that one is opened.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket) // another instance was first
	}
	if err != nil {
		return nil, fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Created is when the bucket's stream was made. A bucket deleted and made
// again has a new one, and a watch of the old stream sees nothing of the
// new: a watcher compares it now and then, and watches again when it
// changed. It is zero when the server does not say.
func Created(ctx context.Context, kv jetstream.KeyValue) (time.Time, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().Created, nil
	}
	return time.Time{}, nil
}

// Recreated reports whether the bucket's stream is no longer the one made
// at created (deleted, or deleted and made again). A check that fails for
// another reason (NATS away) says no: the watch goes on.
func Recreated(ctx context.Context, kv jetstream.KeyValue, created time.Time) bool {
	now, err := Created(ctx, kv)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return true
	}
	return err == nil && !now.IsZero() && !now.Equal(created)
}

// StopWatch stops w, and reads what it still gives until it ends: nats.go
// hands each value to the watch's channel from the subscription's own
// goroutine and waits while the channel is full (256 values), so a watch
// stopped before it read a large bucket's values left that goroutine, and
// what it held, blocked for good.
func StopWatch(w jetstream.KeyWatcher) {
	_ = w.Stop()
	go func() {
		for range w.Updates() { //nolint:revive // drained until nats.go closes it
		}
	}()
}
