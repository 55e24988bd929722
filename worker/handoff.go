package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Cross-machine handoff, by content hash (the buckets and the rules are in
// messages/handoff.go):
//
//   - push: the owner sends a vault's chunks the bucket lacks, its
//     manifest, then moves its head, after the ops messages/handoff.go
//     lists and when Run ends gracefully. Pushes run in the background,
//     at most one per vault at a time; a change during a push queues one
//     more. A fork placed on another worker is pushed before the fork is
//     answered.
//   - reconcile: before a request, a worker serving a vault under an
//     owner epoch it has not checked yet takes the vault's head if it is
//     newer than its copy, fetching only the chunks its store lacks. When
//     it cannot, the request is refused (UNAVAILABLE), never served from a
//     copy that may be outdated.

const (
	pushTimeout = 2 * time.Minute
	pushTries   = 4
	// transfers is how many chunks move at once: bucket requests are
	// round trips, and a vault of small files has many chunks.
	transfers = 8
	// fetchBatch is how many fetched chunks are written to the manifest
	// at once (at most 16 MiB in memory).
	fetchBatch = 256
)

type vkey struct{ ns, vault string }

// replicaStore is what the handoff needs of this worker's store, and all
// it may touch (litestream's Replica over its ReplicaClient is the
// model): the copies' bookkeeping and the content moved by hash.
type replicaStore interface {
	copyStore
	chunkStore
}

// copyStore keeps which copy of a vault this store holds: the owner epoch
// it was current at (store meta), whether it exists, dropping it, and the
// request log a retried fork is answered from.
type copyStore interface {
	Meta(ctx context.Context, key string) (value string, ok bool, err error)
	SetMeta(ctx context.Context, key, value string) error
	SetMetas(ctx context.Context, kv map[string]string) error
	Vault(ns, name string) *vault.Vault
	Delete(ctx context.Context, ns, name string, meta vault.Meta) error
	StoredResult(ctx context.Context, k vault.RequestKey) (result []byte, ok bool, err error)
	StoreResult(ctx context.Context, k vault.RequestKey, result []byte) error
	Commit(b *vault.Batch) error
}

// chunkStore moves a vault's content by hash: the store's identity, a
// manifest out and in, the chunks one side lacks, and what was sent
// where.
type chunkStore interface {
	ID(ctx context.Context) (string, error)
	ExportManifest(ctx context.Context, ns, name, file string) (vault.TransferResult, error)
	Receive(ctx context.Context, file, ns, name string, meta vault.Meta) (vault.TransferResult, error)
	MissingChunks(ctx context.Context, hs []vault.Hash) ([]vault.Hash, error)
	Unsent(ctx context.Context, remote string, hs []vault.Hash) ([]vault.Hash, error)
	MarkSent(ctx context.Context, remote string, hs []vault.Hash) error
	Chunk(ctx context.Context, h vault.Hash) ([]byte, error)
	GC(ctx context.Context) (vault.GCStats, error)
}

// epochKey is the store meta key holding the owner epoch under which this
// store's copy of a vault was last current. It lives in the store, so
// that workers sharing one store (one machine) agree on it.
func epochKey(k vkey) string { return "owner_epoch." + k.ns + "/" + k.vault }

// pushAction is what a push job does for one vault.
type pushAction struct {
	del        bool   // push the deleted vault's tombstone
	seed       bool   // a fork for another worker: its first copy, pushed although not the owner
	reason     string // the op that asked for it, or "drain"
	checkpoint string
}

type pushJob struct {
	next *pushAction   // queued while one runs: the latest wins
	done chan struct{} // closed when the job has run every action queued
}

type handoff struct {
	s       *Server
	st      replicaStore
	mu      sync.Mutex
	jobs    map[vkey]*pushJob
	served  map[vkey]struct{}
	dirty   map[vkey]bool  // changed since its last push began
	checked map[vkey]int64 // owner epoch under which the copy was last reconciled
	// locks serialise reconcile per vault: an approval grant runs beside
	// the vault's queue, and two pulls of one vault must not interleave.
	locks map[vkey]*sync.Mutex
	wg    sync.WaitGroup
	// stopped is set once drain is done: the store may close next, so
	// no push starts after it.
	stopped bool

	// Set by open.
	obs     jetstream.ObjectStore // manifests
	chunkKV jetstream.KeyValue    // chunks
	heads   jetstream.KeyValue    // heads
	remote  string                // the chunks bucket's identity for vault.Store.MarkSent
	storeID string

	// chunks and bytes count what moved, by direction (sent, fetched):
	// an operator sees that a handoff moves only what the other side
	// lacks.
	chunks, bytes metric.Int64Counter
}

func newHandoff(s *Server) *handoff {
	h := &handoff{s: s, st: s.store, jobs: map[vkey]*pushJob{}, served: map[vkey]struct{}{}, dirty: map[vkey]bool{}, checked: map[vkey]int64{},
		locks: map[vkey]*sync.Mutex{}}
	m := s.meter.Meter(scopeName)
	h.chunks, _ = m.Int64Counter("avfs.handoff.chunks", metric.WithUnit("{chunk}"),
		metric.WithDescription("Content chunks moved through NATS, by direction (sent, fetched)."))
	h.bytes, _ = m.Int64Counter("avfs.handoff.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of content chunks moved through NATS, by direction (sent, fetched)."))
	return h
}

// moved counts n chunks of size bytes moved in direction dir.
func (h *handoff) moved(ctx context.Context, dir string, n int, size int64) {
	attrs := metric.WithAttributes(attribute.String("direction", dir))
	h.chunks.Add(ctx, int64(n), attrs)
	h.bytes.Add(ctx, size, attrs)
}

// open finds the buckets and learns the identities the transfers need,
// once.
func (h *handoff) open(ctx context.Context) error {
	h.mu.Lock()
	done := h.obs != nil
	h.mu.Unlock()
	if done {
		return nil
	}
	obs, err := h.s.js.ObjectStore(ctx, messages.BucketVaults)
	if err != nil {
		return fmt.Errorf("object store %s: %w", messages.BucketVaults, err)
	}
	heads, err := h.s.js.KeyValue(ctx, messages.BucketHeads)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", messages.BucketHeads, err)
	}
	kv, err := h.s.js.KeyValue(ctx, messages.BucketChunks)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", messages.BucketChunks, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", messages.BucketChunks, err)
	}
	// Chunks marked sent to a bucket that was since deleted and made
	// again must be sent again: the bucket's creation time tells them
	// apart.
	remote := messages.BucketChunks
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		remote += "@" + bs.StreamInfo().Created.UTC().Format(time.RFC3339Nano)
	}
	id, err := h.st.ID(ctx)
	if err != nil {
		return fmt.Errorf("store id: %w", err)
	}
	h.mu.Lock()
	h.obs, h.chunkKV, h.heads, h.remote, h.storeID = obs, kv, heads, remote, id
	h.mu.Unlock()
	return nil
}

// head reads k's head and its revision; ok is false when k has none.
func (h *handoff) head(ctx context.Context, k vkey) (hd messages.Head, rev uint64, ok bool, err error) {
	e, err := h.heads.Get(ctx, messages.VaultKey(k.ns, k.vault))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return hd, 0, false, nil
	}
	if err != nil {
		return hd, 0, false, fmt.Errorf("head of %s/%s: %w", k.ns, k.vault, err)
	}
	if err := json.Unmarshal(e.Value(), &hd); err != nil {
		return hd, 0, false, fmt.Errorf("head of %s/%s: %w", k.ns, k.vault, err)
	}
	return hd, e.Revision(), true, nil
}

// localEpoch is the owner epoch under which this store's copy of k was
// last current (0: never recorded).
func (h *handoff) localEpoch(ctx context.Context, k vkey) (int64, error) {
	v, ok, err := h.st.Meta(ctx, epochKey(k))
	if err != nil || !ok {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// prep is what before learned for after.
type prep struct {
	// replay: the request's result is in the request log already (a
	// retry), so the handler answers without doing it again.
	replay bool
}

// before runs ahead of a request for a vault owned (at owner.Epoch; 0 when
// the fleet records no owner) by this worker. It brings the local copy up
// to date, and for a fork the target's too when this worker owns it (a
// fork handed over here may not be pulled yet), and refuses a fork whose
// target already exists elsewhere.
func (h *handoff) before(ctx context.Context, c handler.Call, owner messages.Owner) (prep, *messages.Error) {
	var p prep
	req := c.Request
	if req.Vault == "" || req.Namespace == "" {
		return p, nil
	}
	k := vkey{req.Namespace, req.Vault}
	h.mu.Lock()
	h.served[k] = struct{}{}
	h.mu.Unlock()
	unavailable := func(v string, err error) *messages.Error {
		h.s.log.WarnContext(ctx, "handoff: vault not brought up to date", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, v, telemetry.LogKeyErr, err)
		return messages.Errorf(messages.CodeUnavailable, "vault %q: its current copy could not be brought to worker %s: %v; retry", v, h.s.id, err)
	}
	if err := h.reconcile(ctx, k, owner.Epoch, req.RequestID); err != nil {
		return p, unavailable(req.Vault, err)
	}
	if req.Op == messages.OpVaultMerge {
		a, _ := c.Args.(messages.VaultMergeArgs)
		return p, h.beforeMerge(ctx, req, a, unavailable)
	}
	if req.Op != messages.OpVaultFork {
		return p, nil
	}
	a, _ := c.Args.(messages.VaultForkArgs)
	if a.Target == "" {
		return p, nil // the handler answers the malformed request
	}
	if req.RequestID != "" {
		_, replay, err := h.st.StoredResult(ctx, vault.RequestKey{Namespace: req.Namespace, Vault: req.Vault, ID: req.RequestID,
			Op: string(messages.OpVaultFork), ArgsHash: handler.HashArgs(a)})
		if err != nil && !errors.Is(err, vault.ErrConflict) { // the handler answers a conflict
			return p, unavailable(req.Vault, err)
		}
		p.replay = replay
	}
	t, known, err := h.s.owned.Get(ctx, req.Namespace, a.Target)
	if err != nil {
		return p, unavailable(a.Target, err)
	}
	if known && t.Worker == h.s.id {
		if err := h.reconcile(ctx, vkey{req.Namespace, a.Target}, t.Epoch, req.RequestID); err != nil {
			return p, unavailable(a.Target, err)
		}
		return p, nil
	}
	if known && !p.replay {
		return p, h.checkTarget(ctx, req, a.Target, t)
	}
	return p, nil
}

// beforeMerge brings this store's copy of a merge's fork up to date
// when this worker owns the fork too; a fork another worker owns is
// fetched by the merge itself (merge.go).
func (h *handoff) beforeMerge(ctx context.Context, req messages.Request, a messages.VaultMergeArgs, unavailable func(string, error) *messages.Error) *messages.Error {
	if a.Fork == "" || !messages.ValidName(a.Fork) {
		return nil // the handler answers the malformed request
	}
	o, known, err := h.s.owned.Get(ctx, req.Namespace, a.Fork)
	if err != nil {
		return unavailable(a.Fork, err)
	}
	if !known || o.Worker != h.s.id {
		return nil
	}
	if err := h.reconcile(ctx, vkey{req.Namespace, a.Fork}, o.Epoch, req.RequestID); err != nil {
		return unavailable(a.Fork, err)
	}
	return nil
}

// reconcile makes the local copy of k the fleet's current one for owner
// epoch epoch. On error the copy may be outdated and must not be served.
//
// Under a new epoch it also moves k's head to that epoch (same manifest),
// by compare-and-set against the head it compared with: a push the
// previous owner started before the handover, and finishes after, then
// finds a head of a later epoch and gives way, instead of replacing the
// copy this worker took with one it never saw.
func (h *handoff) reconcile(ctx context.Context, k vkey, epoch int64, requestID string) error {
	h.mu.Lock()
	e, ok := h.checked[k]
	l := h.locks[k]
	if l == nil {
		l = &sync.Mutex{}
		h.locks[k] = l
	}
	h.mu.Unlock()
	if ok && e == epoch {
		return nil
	}
	l.Lock()
	defer l.Unlock()
	h.mu.Lock()
	e, ok = h.checked[k]
	h.mu.Unlock()
	if ok && e == epoch {
		return nil // reconciled while this waited
	}
	if logged, err := h.s.clog.loggedAt(ctx, k); err != nil {
		return err
	} else if logged {
		return h.reconcileLogged(ctx, k, epoch, requestID) // changelog.go
	}
	st := h.st
	exists, err := st.Vault(k.ns, k.vault).Exists(ctx)
	if err != nil {
		return err
	}
	local, err := h.localEpoch(ctx, k)
	if err != nil {
		return err
	}
	if !exists || local != epoch {
		if err := h.open(ctx); err != nil {
			return err
		}
		hd, rev, ok, err := h.head(ctx, k)
		if err != nil {
			return err
		}
		if ok && h.newer(hd, exists, local) {
			switch {
			case hd.Deleted && exists:
				// Deleted elsewhere after this copy was current. No
				// request id: the request log would then answer the
				// request being served with this delete's result.
				if err := st.Delete(ctx, k.ns, k.vault, vault.Meta{Actor: "worker:" + h.s.id}); err != nil {
					return fmt.Errorf("drop the copy of a deleted vault: %w", err)
				}
				h.s.h.Changed(messages.OpVaultDelete, k.ns, k.vault)
				exists = false
			case !hd.Deleted:
				if err := h.pull(ctx, k, hd, exists, requestID); err != nil {
					return fmt.Errorf("pull: %w", err)
				}
				exists = true
			}
		}
		if !exists {
			// Nothing to remember: the vault may yet arrive here, made
			// by a create, or pushed by a fork's source worker.
			return nil
		}
		return h.settle(ctx, k, epoch, hd, rev, ok)
	}
	h.mu.Lock()
	h.checked[k] = epoch
	h.mu.Unlock()
	return nil
}

// settle ends a reconcile whose copy is now current: the head (hd at
// revision rev, when ok) moves to epoch, and the store and this worker
// record that the copy is current at it.
func (h *handoff) settle(ctx context.Context, k vkey, epoch int64, hd messages.Head, rev uint64, ok bool) error {
	if ok && epoch > hd.Epoch {
		hd.Epoch = epoch
		b, _ := json.Marshal(hd)
		if _, err := h.heads.Update(ctx, messages.VaultKey(k.ns, k.vault), b, rev); err != nil {
			// A push landed since the head was read (the previous owner,
			// finishing): the next request takes the vault again.
			h.s.clog.forget(k)
			return fmt.Errorf("move the head to epoch %d: %w", epoch, err)
		}
	}
	if epoch > 0 {
		if err := h.st.SetMeta(ctx, epochKey(k), strconv.FormatInt(epoch, 10)); err != nil {
			return fmt.Errorf("record epoch: %w", err)
		}
	}
	h.mu.Lock()
	h.checked[k] = epoch
	h.mu.Unlock()
	return nil
}

// newer reports whether a head supersedes the local copy (if exists) that
// was current at owner epoch local. A head pushed from this very store
// never does, not even when the store has no copy (it was deleted here
// since): the store has everything it had, and more. The exception is a
// fork's first copy (a seed), pushed by its source's worker, which drops
// its own copy: a worker sharing that store takes it. Otherwise a later
// epoch wins: pushes are made only by an epoch's owner from a copy
// current at that epoch (or as a seed, only onto no head or a deleted
// vault's), and a head never moves back to an earlier epoch.
func (h *handoff) newer(hd messages.Head, exists bool, local int64) bool {
	if hd.Store == h.storeID {
		return !exists && hd.Seed
	}
	if !exists {
		return true
	}
	return hd.Epoch > local
}

// checkTarget refuses a fork onto a vault name that another worker, o,
// holds: its store cannot see that vault, so the fork would make a second
// one. The target's owner record names the request that placed it, which
// tells a fork's own placement from an earlier one; for an earlier one
// the owner is asked whether it has the vault, and when it cannot answer,
// the target's head decides.
func (h *handoff) checkTarget(ctx context.Context, req messages.Request, target string, o messages.Owner) *messages.Error {
	if req.RequestID != "" && o.Request == req.RequestID {
		return nil
	}
	exists := func() bool {
		if has, err := h.s.cat.has(ctx, req.Namespace, target); err == nil && has {
			return true
		}
		// A fork handed over but not pulled yet is only a head.
		hd, _, ok, err := h.head(ctx, vkey{req.Namespace, target})
		return err != nil || ok && !hd.Deleted
	}
	if err := h.open(ctx); err == nil && !exists() {
		return nil
	}
	return messages.Errorf(messages.CodeVaultExists, "vault %q already exists (on worker %s)", target, o.Worker)
}

// pull fetches the manifest hd names and the chunks this store lacks,
// then imports it, in place of the local copy when replace.
func (h *handoff) pull(ctx context.Context, k vkey, hd messages.Head, replace bool, requestID string) (err error) {
	ctx, span := h.s.tr.Start(ctx, "handoff.pull", trace.WithAttributes(attribute.String("avfs.vault", k.vault),
		attribute.Int64("avfs.head_epoch", hd.Epoch), attribute.String("avfs.head_worker", hd.Worker), attribute.Bool("avfs.replace", replace)))
	defer func() { telemetry.End(span, err) }()
	dir, err := os.MkdirTemp("", "avfs-pull-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "manifest.db")
	gv, err := h.gcState(ctx) // chunkgc.go: marked below only if no sweep ran meanwhile
	if err != nil {
		return err
	}
	if err := h.obs.GetFile(ctx, hd.Object, file); err != nil {
		return fmt.Errorf("download %s: %w", hd.Object, err)
	}
	st := h.st
	hs, err := vault.ManifestChunks(ctx, file)
	if err != nil {
		return err
	}
	missing, err := st.MissingChunks(ctx, hs)
	if err != nil {
		return err
	}
	// The fetched chunks go into the manifest file, so that the import
	// stores them in the transaction that references them.
	var mu sync.Mutex
	batch := map[vault.Hash][]byte{}
	var fetched int64
	flush := func() error { // under mu
		if err := vault.AddChunks(ctx, file, batch); err != nil {
			return err
		}
		clear(batch)
		return nil
	}
	err = parallel(ctx, missing, func(ctx context.Context, c vault.Hash) error {
		e, err := h.chunkKV.Get(ctx, c.String())
		if err != nil {
			return fmt.Errorf("chunk %s: %w", c, err)
		}
		mu.Lock()
		defer mu.Unlock()
		batch[c] = e.Value()
		fetched += int64(len(e.Value()))
		if len(batch) >= fetchBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return err
	}
	if _, err := st.Receive(ctx, file, k.ns, k.vault, vault.Meta{Actor: "worker:" + h.s.id, RequestID: requestID}); err != nil {
		return err
	}
	if replace {
		// A mount of the old copy shows nodes that are gone.
		h.s.h.Changed(messages.OpVaultDelete, k.ns, k.vault)
	}
	if replace {
		// Free the replaced copy's content, off the request's path.
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if _, err := st.GC(context.WithoutCancel(ctx)); err != nil {
				h.s.log.Warn("handoff: gc after replace", telemetry.LogKeyErr, err)
			}
		}()
	}
	// Every chunk of the manifest is in the bucket: this store need not
	// send them when it pushes the vault.
	if err := h.markFetched(ctx, st, gv, hs); err != nil {
		return err
	}
	h.moved(ctx, "fetched", len(missing), fetched)
	span.SetAttributes(attribute.Int("avfs.chunks", len(hs)), attribute.Int("avfs.chunks_fetched", len(missing)), attribute.Int64("avfs.bytes_fetched", fetched))
	h.s.log.Info("pulled vault", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, "chunks", len(hs), "fetched", len(missing), "fetched_bytes", fetched,
		"replaced", replace, "epoch", hd.Epoch, "from", hd.Worker)
	return nil
}

// parallel runs fn for every hash, transfers at a time, and returns the
// first error; the others are then cancelled.
func parallel(ctx context.Context, hs []vault.Hash, fn func(context.Context, vault.Hash) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan vault.Hash)
	var wg sync.WaitGroup
	for range min(transfers, len(hs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ch {
				if err := fn(ctx, c); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for _, c := range hs {
		select {
		case ch <- c:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	return context.Cause(ctx)
}

// deleteWait bounds how long a vault.delete waits for its tombstone.
const deleteWait = 30 * time.Second

// after runs once a call was served, with its typed result: it
// schedules the pushes the request calls for, and hands a fork placed on
// another worker over before the fork is answered. It returns the
// result, or the error the caller gets instead.
func (h *handoff) after(ctx context.Context, c handler.Call, res any, err error, owner messages.Owner, p prep) (any, error) {
	req := c.Request
	if err != nil || req.Vault == "" || req.Namespace == "" {
		return res, err
	}
	k := vkey{req.Namespace, req.Vault}
	if req.Op.Mutating() {
		h.markDirty(k)
	}
	switch req.Op {
	case messages.OpVaultCreate, messages.OpVaultImport:
		h.current(ctx, k, owner.Epoch)
		if !h.s.clog.logged(ctx, k) || owner.Worker != h.s.id { // (else pushed before the reply: changelog.go)
			h.schedule(k, pushAction{reason: string(req.Op)})
		}
	case messages.OpCheckpointSave, messages.OpCheckpointRestore:
		var name string
		switch r := res.(type) {
		case messages.CheckpointResult:
			name = r.Checkpoint.Name
		case messages.RestoreResult:
			name = r.Checkpoint.Name
		}
		h.schedule(k, pushAction{reason: string(req.Op), checkpoint: name})
	case messages.OpVaultMerge:
		if r, ok := res.(messages.MergeResult); ok && r.Applied {
			h.schedule(k, pushAction{reason: string(req.Op), checkpoint: r.Checkpoint})
		}
	case messages.OpVaultFork:
		a, _ := c.Args.(messages.VaultForkArgs)
		return h.afterFork(ctx, req, a, res, p)
	case messages.OpVaultDelete:
		return res, h.afterDelete(ctx, k, req)
	}
	return res, nil
}

// afterDelete pushes the tombstone before the reply (after any push in
// flight), so that whoever learns of the delete and reuses the name (a
// fork onto it, say) finds the vault gone everywhere. A tombstone that did
// not land fails the delete for its caller; the same request again pushes
// it again (the store answers it from its request log).
func (h *handoff) afterDelete(ctx context.Context, k vkey, req messages.Request) error {
	h.mu.Lock()
	delete(h.dirty, k)
	delete(h.served, k)
	delete(h.checked, k)
	h.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, deleteWait)
	defer cancel()
	select {
	case <-h.schedule(k, pushAction{del: true, reason: string(req.Op)}):
	case <-wctx.Done():
	}
	hd, _, ok, err := h.head(wctx, k)
	if err == nil && (!ok || hd.Deleted) {
		h.s.clog.dropped(wctx, k)
		return nil // (no head: the vault was never pushed, nothing to bring back)
	}
	if err == nil {
		err = fmt.Errorf("its head still names a copy")
	}
	return messages.Errorf(messages.CodeUnavailable,
		"vault %q deleted on worker %s, but not yet everywhere: %v; retry the request", k.vault, h.s.id, err)
}

// afterFork pushes a fork kept here in the background. A fork placed on
// another worker is pushed before the reply (it can serve the fork only
// once the bucket has it), dropped here, where nothing serves it, and
// warmed there (pulled at once, so that the namespace's vault list shows
// it).
func (h *handoff) afterFork(ctx context.Context, req messages.Request, a messages.VaultForkArgs, res any, p prep) (any, error) {
	if a.Target == "" {
		return res, nil
	}
	t := vkey{req.Namespace, a.Target}
	fail := func(code messages.Code, format string, args ...any) (any, error) {
		return nil, messages.Errorf(code, format, args...)
	}
	o, ok, err := h.s.owned.Get(ctx, req.Namespace, a.Target)
	if err != nil {
		return fail(messages.CodeUnavailable, "fork %s made, but its owner is unknown: %v; retry the request", a.Target, err)
	}
	// The source's next owner answers a retry from the fork's request
	// log row, which only the source's log can bring it: the target is
	// kept by its own snapshot, not by the source's log.
	keep := func() (any, error) {
		if p.replay {
			return res, nil // (kept by the first run)
		}
		if err := h.s.clog.keepResult(ctx, vkey{req.Namespace, req.Vault}, req, handler.HashArgs(a)); err != nil {
			return fail(messages.CodeUnavailable, "fork %s made, but its result not replicated: %v; retry the request", a.Target, err)
		}
		return res, nil
	}
	if !ok || o.Worker == h.s.id {
		h.markDirty(t)
		h.current(ctx, t, o.Epoch)
		h.schedule(t, pushAction{reason: string(req.Op), checkpoint: a.Checkpoint})
		return keep()
	}
	if exists, err := h.st.Vault(t.ns, t.vault).Exists(ctx); err == nil && !exists && p.replay {
		// A retry answered from the result its first run left in the
		// source's log, on a worker that never had the fork: the first
		// run kept it (its snapshot, or its handover).
		if r, ok := res.(messages.ForkResult); ok {
			r.Vault.Worker = o.Worker
			res = r
		}
		return res, nil
	}
	// A failed push fails the fork for its caller; a retry (same request
	// id) finds the stored result and pushes again.
	pushed, err := h.sync(ctx, t, pushAction{seed: true, reason: string(req.Op), checkpoint: a.Checkpoint})
	if err != nil {
		h.s.log.Warn("handoff: fork for another worker", telemetry.LogKeyVault, a.Target, telemetry.LogKeyWorker, o.Worker, telemetry.LogKeyErr, err)
		return fail(messages.CodeUnavailable, "fork %s made, but not handed over to its worker %s: %v; retry the request", a.Target, o.Worker, err)
	}
	drop := func() {
		if err := h.st.Delete(ctx, t.ns, t.vault, vault.Meta{Actor: "worker:" + h.s.id}); err != nil && !errors.Is(err, vault.ErrVaultNotFound) {
			h.s.log.Warn("handoff: drop the copy of a fork handed over", telemetry.LogKeyVault, a.Target, telemetry.LogKeyErr, err)
		}
		h.s.h.Changed(messages.OpVaultDelete, t.ns, t.vault)
	}
	switch {
	case pushed:
		drop()
	case !p.replay:
		// The target has a copy already, made meanwhile by someone else:
		// this fork, made just now, must not replace it.
		drop()
		return fail(messages.CodeVaultExists, "vault %q already exists (on worker %s)", a.Target, o.Worker)
	}
	// (A retry whose first run handed the fork over changes nothing.)
	h.warm(ctx, t, o.Worker)
	if r, ok := res.(messages.ForkResult); ok {
		r.Vault.Worker = o.Worker // where the fork now lives
		res = r
	}
	return keep()
}

// warm asks worker w for vault k's info directly, which makes w pull the
// vault now rather than at its first request; a failure only leaves the
// pull for later.
func (h *handoff) warm(ctx context.Context, k vkey, w string) {
	body, _ := json.Marshal(messages.Request{Op: messages.OpVaultInfo, Namespace: k.ns, Vault: k.vault, RequestID: "warm-" + nuid.Next(), Actor: "worker:" + h.s.id})
	msg := nats.NewMsg(messages.DirectSubject(w, k.ns, k.vault, messages.OpVaultInfo))
	msg.Data = body
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg.Header.Set(messages.HeaderDeadline, time.Now().Add(10*time.Second).UTC().Format(time.RFC3339Nano))
	telemetry.Inject(wctx, msg.Header)
	if _, err := h.s.nc.RequestMsgWithContext(wctx, msg); err != nil {
		h.s.log.Debug("handoff: warm a fork on its worker", telemetry.LogKeyVault, k.vault, telemetry.LogKeyWorker, w, telemetry.LogKeyErr, err)
	}
}

func (h *handoff) markDirty(k vkey) {
	h.mu.Lock()
	h.served[k] = struct{}{}
	h.dirty[k] = true
	h.mu.Unlock()
}

// current records that the local copy of k is current at owner epoch epoch
// (a vault this worker just made).
func (h *handoff) current(ctx context.Context, k vkey, epoch int64) {
	if epoch > 0 {
		if err := h.st.SetMeta(ctx, epochKey(k), strconv.FormatInt(epoch, 10)); err != nil {
			h.s.log.Warn("handoff: record epoch", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, telemetry.LogKeyErr, err)
			return
		}
	}
	h.mu.Lock()
	h.checked[k] = epoch
	h.mu.Unlock()
}

// schedule runs a for k in the background, after the job in flight for
// k if there is one, and returns a channel closed once a has run.
func (h *handoff) schedule(k vkey, a pushAction) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		h.s.log.Error("handoff: push after the worker stopped, not made", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, "reason", a.reason)
		done := make(chan struct{})
		close(done)
		return done
	}
	if j, ok := h.jobs[k]; ok {
		if j.next != nil && !j.next.del && !a.del && a.checkpoint == "" {
			a.checkpoint = j.next.checkpoint
		}
		j.next = &a
		return j.done
	}
	j := &pushJob{done: make(chan struct{})}
	h.jobs[k] = j
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(j.done)
		for {
			// A failed push is tried again a few times, unless a newer
			// one is queued meanwhile: it pushes the same vault anyway.
			for try, wait := 1, time.Second; ; try, wait = try+1, wait*2 {
				_, err := h.sync(context.Background(), k, a)
				if err == nil {
					break
				}
				h.s.log.Warn("handoff push", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, "reason", a.reason, "try", try, telemetry.LogKeyErr, err)
				h.mu.Lock()
				queued := j.next != nil
				h.mu.Unlock()
				if queued || try == pushTries {
					break
				}
				time.Sleep(wait)
			}
			h.mu.Lock()
			if j.next == nil {
				delete(h.jobs, k)
				h.mu.Unlock()
				return
			}
			a, j.next = *j.next, nil
			h.mu.Unlock()
		}
	}()
	return j.done
}

// drain pushes, and waits for, every served vault changed since its last
// push; Run calls it when it ends gracefully. A vault whose push failed
// (its job tried pushTries times) is tried again, for a few rounds; what
// is still unpushed after them is logged: those changes stay in this
// store only, and a worker on another machine taking the vault over
// starts from its last push.
func (h *handoff) drain() {
	for round := 1; ; round++ {
		h.mu.Lock()
		var ks []vkey
		for k := range h.served {
			if h.dirty[k] {
				ks = append(ks, k)
			}
		}
		h.mu.Unlock()
		if len(ks) == 0 || round > 3 {
			for _, k := range ks {
				h.s.log.Error("handoff: changes not pushed before stopping", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault)
			}
			h.mu.Lock()
			h.stopped = true
			h.mu.Unlock()
			h.wg.Wait() // a push scheduled meanwhile
			return
		}
		for _, k := range ks {
			h.schedule(k, pushAction{reason: "drain"})
		}
		h.wg.Wait()
	}
}

// sync pushes k: the chunks the bucket lacks and the manifest, or the
// tombstone, then moves its head. Only the owner pushes, only a copy
// current at the owner's epoch, and the head never moves back to an
// earlier epoch: a worker the vault was taken from cannot overwrite its
// new owner's copy, even with a push that started before the handover.
//
// parent carries the trace a push belongs to (a fork's, for a seed);
// background pushes start their own.
func (h *handoff) sync(parent context.Context, k vkey, a pushAction) (pushed bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), pushTimeout)
	defer cancel()
	ctx, span := h.s.tr.Start(ctx, "handoff.push", trace.WithAttributes(attribute.String("avfs.namespace", k.ns),
		attribute.String("avfs.vault", k.vault), attribute.String("avfs.reason", a.reason), attribute.Bool("avfs.seed", a.seed), attribute.Bool("avfs.deleted", a.del)))
	defer func() {
		span.SetAttributes(attribute.Bool("avfs.pushed", pushed))
		telemetry.End(span, err)
	}()
	log := h.s.log.With(telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, "reason", a.reason)
	if err := h.open(ctx); err != nil {
		return false, err
	}
	o, known, err := h.s.owned.Get(ctx, k.ns, k.vault)
	if err != nil {
		return false, err
	}
	if known && !a.seed {
		if o.Worker != h.s.id {
			log.Info("handoff push skipped: not the owner", "owner", o.Worker, telemetry.LogKeyEpoch, o.Epoch)
			return false, nil
		}
		if local, err := h.localEpoch(ctx, k); err != nil {
			return false, err
		} else if local != o.Epoch && !a.del {
			log.Info("handoff push skipped: this copy is not current at the owner epoch", telemetry.LogKeyEpoch, o.Epoch, "copy_epoch", local)
			return false, nil
		}
	}
	hd, rev, ok, err := h.head(ctx, k)
	if err != nil {
		return false, err
	}
	// A head of a later epoch is never replaced; a fork's first copy
	// replaces only a deleted vault's (a retried fork whose target has
	// since changed must not put it back).
	next := messages.Head{Epoch: o.Epoch, Store: h.storeID, Worker: h.s.id, Time: time.Now().UTC().Format(time.RFC3339Nano),
		Reason: a.reason, Checkpoint: a.checkpoint, Deleted: a.del, Seed: a.seed}
	if !a.del && !a.seed {
		next.Replication = h.s.clog.mode(ctx, k)
	}
	// At one epoch, a snapshot never replaces one that includes more of
	// the change log (two pushes of one owner that crossed).
	keep := func(hd messages.Head) bool {
		return hd.Epoch > o.Epoch || a.seed && !hd.Deleted || next.LogSeq > 0 && hd.Epoch == o.Epoch && hd.LogSeq > next.LogSeq
	}
	if ok && keep(hd) {
		log.Info("handoff push skipped: the head is newer", "head_epoch", hd.Epoch, telemetry.LogKeyEpoch, o.Epoch)
		return false, nil
	}
	var pn *pin
	if !a.del {
		if ok, err := h.st.Vault(k.ns, k.vault).Exists(ctx); err != nil || !ok {
			return false, err
		}
		if !a.seed { // (a seeded fork is not served here)
			h.mu.Lock()
			h.dirty[k] = false // a change from here on needs another push
			h.mu.Unlock()
		}
		if next.Object, next.Chunks, pn, err = h.upload(ctx, k, next, a.seed); err != nil {
			if !a.seed {
				h.markDirty(k)
			}
			return false, err
		}
	}
	if pn != nil {
		next.LogSeq = pn.seq
	}
	pushed, err = h.moveHead(ctx, k, next, hd, rev, ok, keep)
	if pushed {
		h.s.clog.landed(ctx, pn)
	}
	if !pushed && next.Object != "" {
		h.obs.Delete(context.WithoutCancel(ctx), next.Object)
	}
	if err != nil && !a.del && !a.seed {
		h.markDirty(k)
	}
	return pushed, err
}

// moveHead sets k's head to next, compare-and-set against hd (revision
// rev; ok false: no head), and deletes the manifest the head named
// before. When another push moved the head meanwhile it reads it again and
// gives way to a head keep wants kept, or to a tombstone (the vault was
// deleted after this push began: at one epoch the owner's pushes run one
// at a time, so another head is a fork's first copy, which the owner's
// replaces, or a tombstone).
func (h *handoff) moveHead(ctx context.Context, k vkey, next, hd messages.Head, rev uint64, ok bool, keep func(messages.Head) bool) (bool, error) {
	key := messages.VaultKey(k.ns, k.vault)
	b, _ := json.Marshal(next)
	for try := 1; ; try++ {
		var err error
		if ok {
			_, err = h.heads.Update(ctx, key, b, rev)
		} else {
			_, err = h.heads.Create(ctx, key, b)
		}
		if err == nil {
			if ok && hd.Object != "" {
				if err := h.obs.Delete(ctx, hd.Object); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
					h.s.log.Warn("handoff: delete the previous manifest", "object", hd.Object, telemetry.LogKeyErr, err)
				}
			}
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, fmt.Errorf("head: %w", err)
		}
		if try == 10 {
			return false, fmt.Errorf("head: kept moving: %w", err)
		}
		time.Sleep(time.Duration(try) * 20 * time.Millisecond)
		if hd, rev, ok, err = h.head(ctx, k); err != nil {
			return false, err
		}
		if ok && (keep(hd) || hd.Deleted && !next.Deleted) {
			h.s.log.Info("handoff push dropped: the head moved to a newer copy", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, "head_epoch", hd.Epoch, telemetry.LogKeyEpoch, next.Epoch)
			return false, nil
		}
	}
}

// upload sends k's chunks the bucket lacks and its manifest, and returns
// the manifest's object name and how many chunks the vault references.
//
// The export is pinned to a change log sequence (changelog.go), which it
// returns; a seed (a fork for another worker's log) is not.
func (h *handoff) upload(ctx context.Context, k vkey, hd messages.Head, seed bool) (_ string, _ int, p *pin, _ error) {
	dir, err := os.MkdirTemp("", "avfs-push-")
	if err != nil {
		return "", 0, nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "manifest.db")
	st := h.st
	if !seed {
		if p, err = h.s.clog.pin(ctx, k, hd.Reason); err != nil {
			return "", 0, nil, fmt.Errorf("pin the snapshot in the change log: %w", err)
		}
	}
	_, err = st.ExportManifest(ctx, k.ns, k.vault, file)
	if p != nil {
		p.unlock()
	}
	if err != nil {
		return "", 0, nil, fmt.Errorf("export: %w", err)
	}
	hs, err := vault.ManifestChunks(ctx, file)
	if err != nil {
		return "", 0, nil, err
	}
	gv, err := h.gcState(ctx) // chunkgc.go: the sent marks' key, whether a sweep runs
	if err != nil {
		return "", 0, nil, err
	}
	unsent, err := st.Unsent(ctx, gv.remote, hs)
	if err != nil {
		return "", 0, nil, err
	}
	var sent int
	var sentBytes int64
	var mu sync.Mutex
	err = parallel(ctx, unsent, func(ctx context.Context, c vault.Hash) error {
		data, err := st.Chunk(ctx, c)
		if err != nil {
			return err
		}
		// Create writes a key only once: a chunk another worker sent
		// meanwhile stays as it is.
		if _, err := h.chunkKV.Create(ctx, c.String(), data); errors.Is(err, jetstream.ErrKeyExists) {
			if gv.deleting {
				return h.freshen(ctx, c, data) // a sweep runs: keep it from deleting this one
			}
			return nil
		} else if err != nil {
			return fmt.Errorf("chunk %s: %w", c, err)
		}
		mu.Lock()
		sent++
		sentBytes += int64(len(data))
		mu.Unlock()
		return nil
	})
	if err != nil {
		return "", 0, nil, err
	}
	h.moved(ctx, "sent", sent, sentBytes)
	if err := st.MarkSent(ctx, gv.remote, unsent); err != nil {
		return "", 0, nil, err
	}
	f, err := os.Open(file)
	if err != nil {
		return "", 0, nil, err
	}
	defer f.Close()
	name := messages.ManifestObject(k.ns, k.vault, fmt.Sprintf("%d-%s", hd.Epoch, nuid.Next()))
	md := map[string]string{messages.ObjectMetaEpoch: strconv.FormatInt(hd.Epoch, 10), messages.ObjectMetaStore: hd.Store,
		messages.ObjectMetaWorker: hd.Worker, messages.ObjectMetaReason: hd.Reason}
	if hd.Checkpoint != "" {
		md[messages.ObjectMetaCheckpoint] = hd.Checkpoint
	}
	if _, err := h.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: md}, f); err != nil {
		return "", 0, nil, fmt.Errorf("manifest: %w", err)
	}
	return name, len(hs), p, nil
}
