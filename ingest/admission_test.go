package ingest_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestAdmissionRecoversFromSlowAcks: acks that were slow for a moment push
// the admission's average past half the ack timeout, and requests are shed
// while it stays there, a probe at most every few tens of milliseconds.
// Once the stream is fast again, the probes' acks bring the average down
// and requests are published again. The average moves only with acks: a
// version without probes shed every request for good after one slow ack
// (seen in the cluster fault suite: an ingest that answered nothing but 503
// for twenty minutes while its stream was healthy).
func TestAdmissionRecoversFromSlowAcks(t *testing.T) {
	for _, kind := range []string{ingest.PublisherBatch, ingest.PublisherAsync} {
		t.Run(kind, func(t *testing.T) {
			srv := schematest.StartJetStream(t)
			nc, err := nats.Connect(srv.URL(), ingest.NATSOptions("admission-test")...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// The stream answers after delay: 2.5 s (slow, within the ack
			// timeout with a margin for a loaded machine, so the acks count)
			// or at once.
			var delay atomic.Int64
			delay.Store(int64(2500 * time.Millisecond))
			slowStream(t, nc, kind, &delay)

			cfg := ingest.DefaultConfig()
			cfg.Publisher = kind
			cfg.AckTimeout = 4 * time.Second
			cfg.QueueWait = 100 * time.Millisecond
			pub, err := ingest.NewPublisher(nc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			var n atomic.Int64
			publish := func() error {
				b := body(int(n.Add(1)))
				now := time.Now()
				_, err := pub.Publish(schema.DefaultApp, schema.RawMsgID(b), b, now, now.Add(cfg.AckTimeout))
				return err
			}

			// One slow ack: the average is 2.5 s, more than half the 4 s.
			if err := publish(); err != nil {
				t.Fatalf("the slow publish: %v", err)
			}
			// While the stream stays slow, 50 requests at once are shed
			// but for a probe every 50 ms at most.
			slowAck := time.Now()
			var wg sync.WaitGroup
			var shed, through, lastAsked atomic.Int64
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					asked := int64(time.Since(slowAck))
					for last := lastAsked.Load(); asked > last && !lastAsked.CompareAndSwap(last, asked); last = lastAsked.Load() {
					}
					switch err := publish(); {
					case errors.Is(err, ingest.ErrOverloaded):
						shed.Add(1)
					case err == nil:
						through.Add(1)
					default:
						t.Errorf("publish while slow: %v", err)
					}
				}()
			}
			wg.Wait()
			// A request can be a probe only as it asks: the time from the
			// slow ack to the last request bounds the probes (one each 50
			// ms, and one more for the moment between asking and the
			// probe's turn).
			probes := 2 + lastAsked.Load()/int64(50*time.Millisecond)
			if through.Load() > probes || shed.Load() < 50-probes {
				t.Fatalf("while the acks are slow: %d published, %d shed of 50 asked within %s; want at most %d probes published",
					through.Load(), shed.Load(), time.Duration(lastAsked.Load()), probes)
			}

			// The stream is fast again: the probes find it out.
			delay.Store(0)
			start := time.Now()
			streak, sheds := 0, 0
			for streak < 20 {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("the stream answers at once, and after %s requests are still shed (%d shed, last streak %d)", time.Since(start), sheds, streak)
				}
				switch err := publish(); {
				case errors.Is(err, ingest.ErrOverloaded):
					sheds++
					streak = 0
					time.Sleep(5 * time.Millisecond)
				case err != nil:
					t.Fatalf("publish after the stream recovered: %v", err)
				default:
					streak++
				}
			}
			if sheds == 0 {
				t.Fatal("no request was shed after the slow acks: the average did not count them")
			}
			t.Logf("%s: published again %s after the stream recovered, %d requests shed meanwhile", kind, time.Since(start).Round(time.Millisecond), sheds)
		})
	}
}

// slowStream answers the RAW stream's publishes, for the publisher kind, as
// stored, *delay after each arrives (each on its own timer, so that one slow
// answer holds up no other).
func slowStream(t *testing.T, nc *nats.Conn, kind string, delay *atomic.Int64) {
	t.Helper()
	var seq atomic.Uint64
	var mu sync.Mutex
	sent := map[string]uint64{} // fast batch id -> messages so far
	sub, err := nc.Subscribe(schema.SubjectRawAll, func(m *nats.Msg) {
		d := time.Duration(delay.Load())
		tok := strings.Split(m.Reply, ".")
		isBatch := len(tok) >= 6 && tok[len(tok)-1] == "$FI"
		if isBatch != (kind == ingest.PublisherBatch) {
			t.Errorf("reply %q to the %s publisher", m.Reply, kind)
			return
		}
		if !isBatch {
			s := seq.Add(1)
			time.AfterFunc(d, func() { _ = m.Respond(fmt.Appendf(nil, `{"stream":"WAHOOK_RAW","seq":%d}`, s)) })
			return
		}
		// A fast-batch message: its batch id, then whether it commits
		// ("2": the last message, "3": an empty commit). Only the commit
		// is answered, with the batch's count.
		id, op := tok[len(tok)-6], tok[len(tok)-2]
		mu.Lock()
		if op != "3" {
			sent[id]++
		}
		count := sent[id]
		mu.Unlock()
		if op == "2" || op == "3" {
			s := seq.Add(count)
			time.AfterFunc(d, func() { _ = m.Respond([]byte(pubAck(s, count))) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
