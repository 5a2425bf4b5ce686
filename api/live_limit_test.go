package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// One token cannot hold every live stream: past maxStreamsPerToken its
// next stream is refused (429), while another token's opens.
func TestLiveStreamsPerToken(t *testing.T) {
	old := maxStreamsPerToken
	maxStreamsPerToken = 2
	t.Cleanup(func() { maxStreamsPerToken = old })
	js := schematest.StartJetStream(t)
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := jsc.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketPacing})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Tokens = []string{"token-one-0123456789", "token-two-0123456789"}
	cfg.Pacing = kv
	s, err := New(cfg, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := s.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
	}()
	open := func(token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/api/v1/pacing/stream", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := range 2 {
		if resp := open("token-one-0123456789"); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of the token: %d", i, resp.StatusCode)
		}
	}
	resp := open("token-one-0123456789")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a third stream of the token: %d %s, want 429", resp.StatusCode, b)
	}
	if resp := open("token-two-0123456789"); resp.StatusCode != http.StatusOK {
		t.Errorf("another token's stream: %d", resp.StatusCode)
	}
}
