package worker

// Chunk garbage collection in the fleet's buckets (docs/decisions.md §27).
//
// BucketChunks holds every chunk any push sent; a chunk stops being
// needed when no manifest names it any more (its vaults were deleted, its
// files and checkpoints dropped). CollectChunks removes those, safe
// against pushes, pulls and forks running at the same time. Three things
// make it safe:
//
//   - The GC state (messages.ChunkGCKey in BucketChunks) says whether a
//     sweep is deleting and counts the sweeps that deleted (Gen). A
//     store's "sent" marks (vault.Store.MarkSent) are keyed by the bucket
//     identity plus that generation (sentRemote), so marks made before a
//     sweep deleted chunks are never trusted after it: the next push of
//     each vault checks every chunk again.
//   - A push that starts while a sweep is deleting trusts no mark and
//     rewrites every chunk it references that the bucket already holds
//     (freshen): a chunk written since the sweep began is never deleted
//     by it, and a rewrite races the sweep's delete by revision (KV delete
//     with the revision the sweep read), never silently.
//   - The sweep waits Settle (longer than a push may take) between
//     announcing itself and listing what is referenced, so every push
//     that started before it was announced has put its manifest by then.
//
// A pull marks what it fetched only when no sweep began or ended while it
// ran.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// gcView is what a push or pull read of the GC state.
type gcView struct {
	remote   string // the key of this store's sent marks
	deleting bool   // a sweep is (or was left) deleting: trust no mark, freshen
}

// gcState reads the GC state and derives the sent-marks key: the bucket's
// identity alone until the first sweep that deleted anything (so marks
// made before chunk GC existed stay valid), then with the generation.
func (h *handoff) gcState(ctx context.Context) (gcView, error) {
	st, _, err := readGCState(ctx, h.chunkKV)
	if err != nil {
		return gcView{}, err
	}
	gen, deleting := st.marksGen(time.Now())
	v := gcView{remote: h.remote, deleting: deleting}
	if gen > 0 {
		v.remote += "#gc" + strconv.FormatUint(gen, 10)
	}
	return v, nil
}

// freshen rewrites chunk c (data) that the bucket already holds, so that
// a sweep running now keeps it (its entry is newer than the sweep's start
// and its revision changed).
func (h *handoff) freshen(ctx context.Context, c vault.Hash, data []byte) error {
	if _, err := h.chunkKV.Put(ctx, c.String(), data); err != nil {
		return fmt.Errorf("chunk %s: %w", c, err)
	}
	return nil
}

// markFetched records that the bucket holds hs, fetched by a pull that
// began under view v, unless a sweep began or ended since.
func (h *handoff) markFetched(ctx context.Context, st chunkStore, v gcView, hs []vault.Hash) error {
	now, err := h.gcState(ctx)
	if err != nil {
		return err
	}
	if v.deleting || now != v {
		return nil // the next push checks these chunks itself
	}
	return st.MarkSent(ctx, v.remote, hs)
}

// gcState is the value of messages.ChunkGCKey.
type gcState struct {
	// Gen counts the sweeps that finished deleting.
	Gen uint64 `json:"gen"`
	// Deleting is set while a sweep runs, until Until: past it, the
	// sweep is taken for dead (it may have deleted some chunks).
	Deleting bool      `json:"deleting,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Until    time.Time `json:"until,omitzero"`
	By       string    `json:"by,omitempty"`
	// Checked is when a periodic look last counted the unreferenced
	// chunks (periodicgc.go), whether it swept or not.
	Checked time.Time `json:"checked,omitzero"`
}

// marksGen is the generation that marks are made and trusted under, and
// whether a sweep may be deleting (then marks are not trusted at all).
// A sweep's marks generation is Gen+1 from the moment it starts: marks
// made under Gen may name chunks it deletes.
func (s gcState) marksGen(now time.Time) (uint64, bool) {
	if !s.Deleting {
		return s.Gen, false
	}
	return s.Gen + 1, now.Before(s.Until)
}

func readGCState(ctx context.Context, kv jetstream.KeyValue) (gcState, uint64, error) {
	e, err := kv.Get(ctx, messages.ChunkGCKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return gcState{}, 0, nil
	}
	if err != nil {
		return gcState{}, 0, fmt.Errorf("gc state: %w", err)
	}
	var s gcState
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return gcState{}, 0, fmt.Errorf("gc state: %w", err)
	}
	return s, e.Revision(), nil
}

func writeGCState(ctx context.Context, kv jetstream.KeyValue, s gcState, rev uint64) (uint64, error) {
	b, _ := json.Marshal(s)
	if rev == 0 {
		return kv.Create(ctx, messages.ChunkGCKey, b)
	}
	return kv.Update(ctx, messages.ChunkGCKey, b, rev)
}

// ChunkGCOptions tune CollectChunks.
type ChunkGCOptions struct {
	// DryRun lists and counts, deletes nothing and announces nothing.
	DryRun bool
	// Settle is how long the sweep waits after announcing itself before
	// it lists the references: longer than any push may take (default
	// DefaultChunkGCSettle). Tests shorten it.
	Settle time.Duration
	// By names the sweeper in the GC state (an operator, a host).
	By string
}

// DefaultChunkGCSettle is pushTimeout plus a margin for the announcement
// to be seen.
const DefaultChunkGCSettle = pushTimeout + 30*time.Second

// chunkGCDeadline bounds a sweep's deleting phase after Settle: past it,
// pushes stop waiting for it and a new sweep may start.
const chunkGCDeadline = 30 * time.Minute

// CollectChunks removes from BucketChunks every chunk that nothing
// references (LiveChunks), safe against concurrent pushes, pulls and
// forks (see the top of this file). It refuses to run while another sweep
// is deleting.
func CollectChunks(ctx context.Context, js jetstream.JetStream, o ChunkGCOptions) (res messages.ChunkGCResult, err error) {
	start := time.Now()
	if o.Settle <= 0 {
		o.Settle = DefaultChunkGCSettle
	}
	res.DryRun = o.DryRun
	kv, err := js.KeyValue(ctx, messages.BucketChunks)
	if err != nil {
		return res, fmt.Errorf("bucket %s: %w", messages.BucketChunks, err)
	}
	st, rev, err := readGCState(ctx, kv)
	if err != nil {
		return res, err
	}
	gen, busy := st.marksGen(time.Now())
	if busy {
		return res, messages.Errorf(messages.CodeConflict, "another chunk sweep (%s) is deleting since %s; it ends by %s", st.By, st.Since.Format(time.RFC3339), st.Until.Format(time.RFC3339))
	}
	res.Generation = gen
	since := time.Now()
	// Pushes stop taking this sweep for alive at Until; it stops deleting
	// a minute before.
	until := since.Add(o.Settle + chunkGCDeadline - time.Minute)
	if !o.DryRun {
		// Announce: from here on pushes trust no mark and freshen.
		next := gcState{Gen: gen, Deleting: true, Since: since, Until: since.Add(o.Settle + chunkGCDeadline), By: o.By}
		if rev, err = writeGCState(ctx, kv, next, rev); err != nil {
			return res, messages.Errorf(messages.CodeConflict, "another chunk sweep started: %v", err)
		}
		// Chunk times are the server's: so is the sweep's start, or a
		// clock ahead of the server's would take chunks freshened after
		// the announcement for older.
		if e, gerr := kv.Get(ctx, messages.ChunkGCKey); gerr == nil && e.Revision() == rev {
			since = e.Created()
		}
		defer func() {
			// Done, failed or cancelled: some chunks may be gone, so the
			// next generation begins. Left as it is when even this
			// fails, the state expires at Until and means the same.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, werr := writeGCState(cctx, kv, gcState{Gen: gen + 1, By: o.By, Since: since}, rev); werr != nil && err == nil {
				err = fmt.Errorf("gc state: %w", werr)
			}
			res.Generation = gen + 1
			res.DurationMS = time.Since(start).Milliseconds()
		}()
		t := time.NewTimer(o.Settle)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		case <-t.C:
		}
	}
	live, manifests, err := LiveChunks(ctx, js)
	if err != nil {
		return res, err
	}
	res.Manifests, res.Referenced = manifests, len(live)
	err = scanChunks(ctx, js, func(key string, seq uint64, at time.Time, size int64) error {
		res.Chunks++
		res.Bytes += size
		if _, ok := live[key]; ok {
			return nil
		}
		res.Unreferenced++
		res.UnreferencedBytes += size
		if o.DryRun {
			return nil
		}
		if time.Now().After(until) {
			return fmt.Errorf("the sweep ran past its deadline (%s): stopped deleting", until.Format(time.RFC3339))
		}
		if !at.Before(since) {
			res.KeptYoung++ // written since the sweep began: a push in flight
			return nil
		}
		switch err := kv.Delete(ctx, key, jetstream.LastRevision(seq)); {
		case err == nil:
			res.Deleted++
			res.DeletedBytes += size
		case isRevisionMismatch(err):
			res.KeptYoung++ // rewritten meanwhile by a push
		default:
			return fmt.Errorf("delete chunk %s: %w", key, err)
		}
		return nil
	})
	res.DurationMS = time.Since(start).Milliseconds()
	return res, err
}

func isRevisionMismatch(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// LiveChunks is the set of chunks something in the fleet still needs,
// and how many manifests it read: THE place that collects GC roots. Today
// the roots are every manifest in BucketVaults (each head's, and any
// manifest a push has put but not yet made a head, or left behind). A new
// kind of reference to chunks (a replication log entry naming the chunks
// of a write) is added here; its writer must write the chunks under the
// GC state like a push does (handoff.gcState, freshen while a sweep is
// deleting), or put its reference within DefaultChunkGCSettle of starting.
func LiveChunks(ctx context.Context, js jetstream.JetStream) (map[string]struct{}, int, error) {
	obs, err := js.ObjectStore(ctx, messages.BucketVaults)
	if err != nil {
		return nil, 0, fmt.Errorf("object store %s: %w", messages.BucketVaults, err)
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return map[string]struct{}{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list manifests: %w", err)
	}
	dir, err := os.MkdirTemp("", "avfs-gc-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	live := map[string]struct{}{}
	n := 0
	for i, info := range infos {
		if info.Deleted {
			continue
		}
		file := filepath.Join(dir, strconv.Itoa(i)+".db")
		if err := obs.GetFile(ctx, info.Name, file); err != nil {
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				continue // replaced by a newer manifest, which is listed or freshened
			}
			return nil, 0, fmt.Errorf("manifest %s: %w", info.Name, err)
		}
		hs, err := vault.ManifestChunks(ctx, file)
		os.Remove(file)
		if err != nil {
			return nil, 0, fmt.Errorf("manifest %s: %w", info.Name, err)
		}
		for _, c := range hs {
			live[c.String()] = struct{}{}
		}
		n++
	}
	return live, n, nil
}

// scanChunks calls fn for every chunk in BucketChunks with its revision,
// time and size, reading headers only (the bucket's stream, last message
// per key).
func scanChunks(ctx context.Context, js jetstream.JetStream, fn func(key string, seq uint64, at time.Time, size int64) error) error {
	stream := "KV_" + messages.BucketChunks
	prefix := "$KV." + messages.BucketChunks + "."
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	last := s.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		HeadersOnly: true, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, FilterSubjects: []string{prefix + ">"},
	})
	if err != nil {
		return fmt.Errorf("scan %s: %w", stream, err)
	}
	// The first fetch asks for one message; each next one for what the
	// last said was pending (at most 256), so no fetch waits out its
	// timeout for messages that do not exist.
	want := 1
	for {
		batch, err := cons.Fetch(want, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return fmt.Errorf("scan %s: %w", stream, err)
		}
		n := 0
		var pending uint64
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			pending = md.NumPending
			key := m.Subject()[len(prefix):]
			op := m.Headers().Get("KV-Operation")
			if key == messages.ChunkGCKey || op == "DEL" || op == "PURGE" {
				continue
			}
			size, _ := strconv.ParseInt(m.Headers().Get(nats.MsgSize), 10, 64)
			if err := fn(key, md.Sequence.Stream, md.Timestamp, size); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("scan %s: %w", stream, err)
		}
		if n == 0 || pending == 0 {
			return nil
		}
		want = int(min(pending, 256))
	}
}
