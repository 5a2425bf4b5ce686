// Package kvbucket opens the JetStream KV buckets that wahook's parts make
// on first use.
package kvbucket

import (
	"context"
	"errors"
	"fmt"

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
