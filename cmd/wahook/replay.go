package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
)

// runReplay feeds RAW history through stage 1 again; deterministic event ids
// make the result the same as if it had never been replayed.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("replay", stderr)
	var (
		no    natsOptions
		eo    embeddedOptions
		po    processOptions
		logo  logOptions
		since string
	)
	no.register(f, "NATS server URLs (empty: the embedded store under --data-dir, which no running serve may hold)")
	eo.register(f)
	po.registerReplay(f)
	logo.register(f)
	f.StringVar(&since, "since", "", "replay bodies received since this time: RFC 3339 (2026-12-01T00:00:00Z) or a duration back from now (24h)")
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	now := time.Now()
	from, err := parseSince(since, now)
	if err != nil {
		return err
	}
	// A time to come replays nothing: a typo, not a request (a minute's
	// leeway for clocks that differ).
	if from.After(now.Add(time.Minute)) {
		return fmt.Errorf("%w: --since %s is in the future (now %s): nothing would be replayed", errUsage, from.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if err := no.validate(); err != nil {
		return err
	}
	if err := eo.validate(f, no); err != nil {
		return err
	}
	if err := po.validate(); err != nil {
		return err
	}
	log, err := commandLogger(f, logo, stdout, stderr)
	if log == nil || err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
	nc, closeNATS, err := openNATSForTask(ctx, no, eo, log, "wahook-replay")
	if err != nil {
		return err
	}
	defer closeNATS()
	po.oneShot = true
	deps, err := setupStage1(ctx, log, nc, &po, eo.dataDir, 1, false)
	if err != nil {
		return err
	}
	defer deps.conn.Close()
	// RAW keeps bodies for --raw-max-age: a --since before its first body
	// cannot be replayed from, and the summary says where it starts.
	rawFrom := from
	if st, err := deps.js.Stream(ctx, schema.StreamRaw); err == nil {
		if first := st.CachedInfo().State.FirstTime; first.After(from) {
			rawFrom = first
			log.Warn("RAW holds no body received before its first, later than --since: those are gone (--raw-max-age)",
				zap.Time("since", from), zap.Time("raw_first", first))
		}
	}
	start := time.Now()
	res, err := processor.Replay(ctx, po.cfg, deps.js, deps.writer, deps.norm, deps.numbers, from, log)
	if err != nil {
		return replayStopped(err, res)
	}
	held := ""
	if rawFrom != from {
		held = fmt.Sprintf(" (RAW holds bodies since %s only)", rawFrom.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(stdout, "replayed %d bodies (RAW sequences %d-%d) since %s%s: %d rows, %d dead letters, in %s\n",
		res.Bodies, res.FirstSeq, res.LastSeq, from.Format(time.RFC3339), held, res.Rows, res.DeadLetters, time.Since(start).Round(time.Millisecond))
	return nil
}

// replayStopped is the error of a replay that stopped with err: where it
// stopped, and the --since that goes on from there (a long replay that met
// a refusal or a signal was run again from its first --since).
func replayStopped(err error, res processor.ReplayResult) error {
	if res.WrittenSeq == 0 {
		return fmt.Errorf("%w (nothing was written)", err)
	}
	return fmt.Errorf("%w (the bodies up to RAW sequence %d are written; to go on from there, run it again with --since %s)",
		err, res.WrittenSeq, res.WrittenAt.UTC().Truncate(time.Second).Format(time.RFC3339))
}

// parseSince reads --since: an RFC 3339 time or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("%w: --since is required", errUsage)
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: --since %q: want an RFC 3339 time or a positive duration such as 24h", errUsage, s)
}
