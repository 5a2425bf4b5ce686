package testutil

import "go.uber.org/goleak"

// Leftovers are the goroutines that the libraries wahook's tests run keep
// past a test, by design or by a race of their own; a package's TestMain
// passes them to goleak.VerifyTestMain beside any of its own. A test that
// forgets to stop a server it started still fails: a server left running
// keeps many goroutines of its own (its accept loops, its clients), none
// of them in this list.
//
//   - fasthttp keeps a process-wide date updater and address cache
//     cleaner, and the cleaners of a stopped server's workers and of a
//     client's idle connections, which leave at their next tick.
//   - nats-server: a sourced stream (stage 2's consumer group) waits for
//     its source consumer until a timeout of seconds, even on a server shut
//     down in the middle of the setup.
//   - nats-server: a stream that a JetStream API request was still
//     creating while the server shut down (a process stopped during its
//     provisioning) is created after the server stopped its streams, and
//     its file store's state flusher and the access-time ticker it
//     registered are never stopped. Seen once in CI in cmd/wahook, with
//     nats-server v2.15.3: (*fileStore).flushStreamStateLoop and
//     ats.Register.func1, both started by the stream's creation.
func Leftovers() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	}
}
