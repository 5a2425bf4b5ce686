package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/throttle"
)

// embeddedOptions are the flags of the embedded nats-server of serve.
type embeddedOptions struct {
	dataDir, listen, sync string
	maxStore              int64
}

func (o *embeddedOptions) register(f *flags) {
	f.Section("embedded NATS server", func() {
		f.StringVar(&o.dataDir, "data-dir", "./data", "directory of the embedded JetStream store")
		f.StringVar(&o.listen, "nats-listen", "127.0.0.1:4222", "where the embedded NATS server accepts other clients (empty: none; refused with --nats-url)")
		f.StringVar(&o.sync, "jetstream-sync", "default", "embedded JetStream fsync: default (every 2 min), always (survives power loss, ~10x slower), or a duration (refused with --nats-url)")
		f.Int64Var(&o.maxStore, "jetstream-max-store", 0, "embedded JetStream file store limit in bytes (0: the server's default; refused with --nats-url)")
	})
}

// validate checks the embedded server's flags: --jetstream-sync's value,
// and that none of the flags only the embedded server reads is given on the
// command line with --nats-url, where it would be ignored in silence (a
// --jetstream-max-store meant to bound the store bounds nothing; the
// external servers' own configuration does). Their variables are not
// refused: a migrate or replay run with --nats-url beside a serve inherits
// serve's environment. --data-dir is not one of them: the phone hash key is
// kept under it.
func (o *embeddedOptions) validate(f *flags, no natsOptions) error {
	if _, _, err := durationOrAlways(o.sync); err != nil {
		return err
	}
	if no.urls == "" {
		return nil
	}
	for _, name := range []string{"nats-listen", "jetstream-sync", "jetstream-max-store"} {
		if givenOnCommandLine(f, name) {
			return fmt.Errorf("%w: --%s is for the embedded NATS server, which does not run with --nats-url: set it on the NATS servers named there, or leave it out",
				errUsage, name)
		}
	}
	return nil
}

// embedded is the embedded nats-server and the lock on its store.
type embedded struct {
	*server.Server
	lock *os.File
}

// Stop stops the server and releases the store.
func (e *embedded) Stop() {
	e.Shutdown()
	e.WaitForShutdown()
	e.lock.Close() // closing the file releases the flock
}

// lockDataDir takes an exclusive lock on <dir>/wahook.lock: nats-server does
// not keep a second server off its store, and two on one store could damage
// bodies already answered 200. migrate and replay without --nats-url meet a
// running serve here and are told to use --nats-url.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, "wahook.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s is in use by another wahook (a running serve?): reach its NATS with --nats-url instead", errUsage, dir)
	}
	return f, nil
}

// embeddedMaxPayload is the embedded server's max_payload: Meta sends
// bodies of up to 3 MB, and --body-limit is checked against it before
// anything starts.
const embeddedMaxPayload = 8 << 20

// startEmbedded starts the embedded nats-server with JetStream. An address
// it cannot listen on is reported at once, as is an error the server calls
// fatal (it logs such an error and goes on, never ready); ctx's end stops the
// wait for it.
func startEmbedded(ctx context.Context, o embeddedOptions, log *zap.Logger) (*embedded, error) {
	syncEvery, syncAlways, err := durationOrAlways(o.sync)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:             "wahook",
		JetStream:              true,
		StoreDir:               o.dataDir, // the server adds jetstream/ below it
		SyncInterval:           syncEvery,
		SyncAlways:             syncAlways,
		JetStreamMaxStore:      o.maxStore,
		NoSigs:                 true,
		MaxPayload:             embeddedMaxPayload,
		DisableJetStreamBanner: true,
	}
	if o.listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(o.listen)
		if err != nil {
			return nil, fmt.Errorf("%w: --nats-listen %q: %v", errUsage, o.listen, err)
		}
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil || opts.Port < 0 || opts.Port > 65535 {
			return nil, fmt.Errorf("%w: --nats-listen %q: bad port", errUsage, o.listen)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT // the server takes 0 for its default, 4222
		}
	}
	lock, err := lockDataDir(o.dataDir)
	if err != nil {
		return nil, err
	}
	if !opts.DontListen {
		// The server only logs an address it cannot listen on, and is
		// never ready: try it first.
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("embedded nats-server: --nats-listen %s: %w", o.listen, err)
		}
		ln.Close()
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	fatal := make(chan string, 1)
	srv.SetLoggerV2(&natsLogger{l: log.Named("nats").Sugar(), fatal: fatal}, false, false, false)
	srv.Start()
	stop := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		lock.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); !srv.ReadyForConnections(100 * time.Millisecond); {
		select {
		case msg := <-fatal:
			stop()
			return nil, fmt.Errorf("embedded nats-server (store %s, --nats-listen %q): %s", opts.StoreDir, o.listen, msg)
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("embedded nats-server not ready: %w", ctx.Err())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("embedded nats-server not ready within 30s (store %s)", opts.StoreDir)
		}
	}
	return &embedded{Server: srv, lock: lock}, nil
}

// connectEmbedded opens an in-process connection to srv: no TCP hop.
func connectEmbedded(srv *embedded, name string, log *zap.Logger) (*nats.Conn, error) {
	opts := append(ingest.NATSOptions(name), nats.InProcessServer(srv.Server))
	opts = append(opts, connLogging(log, name)...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats-server: %w", err)
	}
	return nc, nil
}

// connectExternal connects to the NATS servers of o.urls.
func connectExternal(o natsOptions, name string, log *zap.Logger) (*nats.Conn, error) {
	opts := append(ingest.NATSOptions(name), connLogging(log, name)...)
	if o.creds != "" {
		opts = append(opts, nats.UserCredentials(o.creds))
	}
	if o.tlsCA != "" {
		opts = append(opts, nats.RootCAs(o.tlsCA))
	}
	if o.tlsCert != "" {
		opts = append(opts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	nc, err := nats.Connect(o.urls, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", redactNATSError(err))
	}
	return nc, nil
}

// redactNATSError is err, from nats.Connect, without the URLs it was
// given: a URL the client cannot parse comes back as a *url.Error, whose
// text quotes it, or the part the parser cut (a password with a ',' splits
// the list there, one with a bad escape is quoted from it), password and
// all. The client's other errors name a server by its host alone.
func redactNATSError(err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return errors.New("a NATS server URL cannot be parsed (not shown: it may hold a password); percent-encode any of : / ? # @ , % in its user or password")
	}
	return err
}

// connLogging logs the connection's disconnects, reconnects and close:
// while NATS is away, ingest answers 503 and the stages wait, and the log
// says why. The server's URL is logged without its credentials. Errors the
// client meets on its own (a subscription too slow for its messages, which
// drops them; a failed write) are logged too: without a handler the client
// prints them to stderr, outside the structured log.
func connLogging(log *zap.Logger, name string) []nats.Option {
	if log == nil {
		return nil
	}
	l := log.With(zap.String("connection", name))
	errs := &throttle.Throttle{Every: 10 * time.Second}
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			// The client calls this on a close too (a drain at shutdown),
			// without an error: that is no loss of NATS, and the closed
			// handler speaks of it. A lost server comes with the error
			// that lost it, even when the connection was closed before
			// this ran.
			if err == nil && nc.IsClosed() {
				return
			}
			l.Warn("nats disconnected, reconnecting", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			l.Info("nats reconnected", zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		// Once per 10 s at most, with the count: a subscription that stays
		// slow reports each drop, and a KV watch while NATS is away reports
		// every few seconds. Only the error and the count dropped: the
		// subscription's subject is not read here (the client rewrites it
		// under its own lock when it resets an ordered consumer).
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			n, due := errs.Note()
			if !due {
				return
			}
			fields := []zap.Field{zap.Error(err), zap.Int64("errors_since_last_line", n)}
			if sub != nil {
				if dropped, derr := sub.Dropped(); derr == nil {
					fields = append(fields, zap.Int("dropped", dropped))
				}
			}
			l.Warn("nats client error", fields...)
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				l.Warn("nats connection closed", zap.Error(err))
			}
		}),
	}
}

// natsLogger sends the embedded server's log lines to zap, and the first
// fatal one, which the server does not act on, to fatal.
type natsLogger struct {
	l     *zap.SugaredLogger
	fatal chan<- string
}

func (n *natsLogger) Noticef(format string, v ...any) { n.l.Infof(format, v...) }
func (n *natsLogger) Warnf(format string, v ...any)   { n.l.Warnf(format, v...) }
func (n *natsLogger) Fatalf(format string, v ...any) {
	n.l.Errorf(format, v...)
	select {
	case n.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (n *natsLogger) Errorf(format string, v ...any) { n.l.Errorf(format, v...) }
func (n *natsLogger) Debugf(format string, v ...any) { n.l.Debugf(format, v...) }
func (n *natsLogger) Tracef(format string, v ...any) {}

// openNATS connects to the servers of no.urls or, when they are empty and eo
// is given, starts the embedded server on eo's store and connects in-process.
// srv is nil for external servers; the caller closes nc before it stops srv.
func openNATS(ctx context.Context, no natsOptions, eo *embeddedOptions, log *zap.Logger, name string) (nc *nats.Conn, srv *embedded, err error) {
	if no.urls != "" || eo == nil {
		nc, err = connectExternal(no, name, log)
		return nc, nil, err
	}
	if srv, err = startEmbedded(ctx, *eo, log); err != nil {
		return nil, nil, err
	}
	if nc, err = connectEmbedded(srv, name, log); err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return nc, srv, nil
}

// openNATSForTask opens NATS for a command that runs once and exits
// (migrate, replay): the embedded store, when used, takes no clients of its
// own. done closes the connection, then stops the server.
func openNATSForTask(ctx context.Context, no natsOptions, eo embeddedOptions, log *zap.Logger, name string) (nc *nats.Conn, done func(), err error) {
	eo.listen = ""
	nc, srv, err := openNATS(ctx, no, &eo, log, name)
	if err != nil {
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		if srv != nil {
			srv.Stop()
		}
	}, nil
}
