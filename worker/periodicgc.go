package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// Periodic chunk garbage collection (config fleet.gc_interval): every
// worker looks about once per interval (with jitter, so a fleet started
// at once does not look at once) whether the fleet's last sweep, or last
// look, is older than the interval. The first to claim the look (a
// compare-and-set on the GC state, messages.ChunkGCKey) counts the
// unreferenced chunks without announcing anything (a dry run costs the
// pushes nothing) and sweeps only when there are some: a sweep starts a
// new marks generation, after which each vault's next push checks all its
// chunks again. The sweep is CollectChunks, as `avfs fleet gc` runs it.

// collectPeriodically runs sweeps until ctx ends; it returns at once when
// the interval is 0.
func (s *Server) collectPeriodically(ctx context.Context) {
	every := s.o.GCInterval
	if every <= 0 {
		return
	}
	t := time.NewTimer(jitter(every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, ran, err := PeriodicSweep(ctx, s.js, every, ChunkGCOptions{Settle: s.o.GCSettle, By: "worker " + s.id})
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("periodic chunk gc", telemetry.LogKeyErr, err)
		case ran:
			s.log.Info("periodic chunk gc", "deleted", res.Deleted, "deleted_bytes", res.DeletedBytes, "chunks", res.Chunks, "ms", res.DurationMS)
		}
		t.Reset(jitter(every))
	}
}

// jitter is d give or take a tenth.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// PeriodicSweep is one look of the periodic chunk GC: unless a sweep
// started or a look was claimed within the last interval (less a tenth,
// the jitter), it claims the look, counts the unreferenced chunks, and
// when there are some runs a sweep with o (o.DryRun is ignored). ran says
// whether it deleted, or tried to.
func PeriodicSweep(ctx context.Context, js jetstream.JetStream, interval time.Duration, o ChunkGCOptions) (res messages.ChunkGCResult, ran bool, err error) {
	kv, err := js.KeyValue(ctx, messages.BucketChunks)
	if err != nil {
		return res, false, fmt.Errorf("bucket %s: %w", messages.BucketChunks, err)
	}
	st, rev, err := readGCState(ctx, kv)
	if err != nil {
		return res, false, err
	}
	now := time.Now()
	if _, busy := st.marksGen(now); busy {
		return res, false, nil // a sweep is deleting
	}
	last := st.Since
	if st.Checked.After(last) {
		last = st.Checked
	}
	if now.Sub(last) < interval-interval/10 {
		return res, false, nil
	}
	st.Checked, st.By = now, o.By
	if _, err := writeGCState(ctx, kv, st, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isRevisionMismatch(err) {
			return res, false, nil // another worker claimed this look
		}
		return res, false, fmt.Errorf("claim the sweep: %w", err)
	}
	dry, err := CollectChunks(ctx, js, ChunkGCOptions{DryRun: true})
	if err != nil || dry.Unreferenced == 0 {
		return dry, false, err
	}
	o.DryRun = false
	res, err = CollectChunks(ctx, js, o)
	return res, true, err
}
