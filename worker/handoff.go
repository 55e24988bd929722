package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// Cross-machine handoff, by content hash (the object layout and the rules
// are in messages/handoff.go):
//
//   - push: the owner sends a vault's chunks the bucket lacks, then its
//     manifest, after the ops that messages.BucketVaults lists and when
//     Run ends gracefully. Pushes run in the background, at most one per
//     vault at a time; a change during a push queues one more. A fork
//     placed on another worker is pushed before the fork is answered.
//   - reconcile: before a request, a worker serving a vault under an
//     owner epoch it has not checked yet takes the pushed manifest if it
//     is newer than its copy, fetching only the chunks its store lacks.

const (
	pushTimeout = 2 * time.Minute
	pushTries   = 4
	// transfers is how many chunks move at once: object store requests
	// are round trips, and a vault of small files has many chunks.
	transfers = 8
)

type vkey struct{ ns, vault string }

// epochKey is the store meta key holding the owner epoch under which this
// store's copy of a vault was last current. It lives in the store, so
// that workers sharing one store (one machine) agree on it.
func epochKey(k vkey) string { return "owner_epoch." + k.ns + "/" + k.vault }

// pushAction is what a push job does for one vault.
type pushAction struct {
	del        bool   // push the deleted vault's tombstone
	seed       bool   // a fork for another worker: push although not the owner
	reason     string // the op that asked for it, or "drain"
	checkpoint string
}

type pushJob struct {
	next *pushAction // queued while one runs: the latest wins
}

type handoff struct {
	s       *Server
	mu      sync.Mutex
	jobs    map[vkey]*pushJob
	served  map[vkey]struct{}
	dirty   map[vkey]bool  // changed since its last push began
	checked map[vkey]int64 // owner epoch under which the copy was last reconciled
	wg      sync.WaitGroup

	obs     jetstream.ObjectStore // manifests
	chunkKV jetstream.KeyValue    // chunks
	remote  string                // the chunks bucket's identity for vault.Store.MarkSent
	storeID string

	// chunks and bytes count what moved, by direction (sent, fetched):
	// an operator sees that a handoff moves only what the other side
	// lacks.
	chunks, bytes metric.Int64Counter
}

func newHandoff(s *Server) *handoff {
	h := &handoff{s: s, jobs: map[vkey]*pushJob{}, served: map[vkey]struct{}{}, dirty: map[vkey]bool{}, checked: map[vkey]int64{}}
	m := s.h.Meter().Meter(meterName)
	h.chunks, _ = m.Int64Counter("avfs.handoff.chunks", metric.WithUnit("{chunk}"),
		metric.WithDescription("Content chunks moved through the object store, by direction (sent, fetched)."))
	h.bytes, _ = m.Int64Counter("avfs.handoff.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of content chunks moved through the object store, by direction (sent, fetched)."))
	return h
}

// moved counts n chunks of size bytes moved in direction dir.
func (h *handoff) moved(ctx context.Context, dir string, n int, size int64) {
	attrs := metric.WithAttributes(attribute.String("direction", dir))
	h.chunks.Add(ctx, int64(n), attrs)
	h.bytes.Add(ctx, size, attrs)
}

// store returns the manifests' object store, and on first use opens the
// chunks bucket and learns the identities the transfers need.
func (h *handoff) store(ctx context.Context) (jetstream.ObjectStore, error) {
	h.mu.Lock()
	obs := h.obs
	h.mu.Unlock()
	if obs != nil {
		return obs, nil
	}
	obs, err := h.s.js.ObjectStore(ctx, messages.BucketVaults)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", messages.BucketVaults, err)
	}
	kv, err := h.s.js.KeyValue(ctx, messages.BucketChunks)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", messages.BucketChunks, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", messages.BucketChunks, err)
	}
	// Chunks marked sent to a bucket that was since deleted and made
	// again must be sent again: the bucket's creation time tells them
	// apart.
	remote := messages.BucketChunks
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		remote += "@" + bs.StreamInfo().Created.UTC().Format(time.RFC3339Nano)
	}
	id, err := h.s.h.Store().ID(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.obs, h.chunkKV, h.remote, h.storeID = obs, kv, remote, id
	h.mu.Unlock()
	return obs, nil
}

// before runs ahead of a request for a vault owned (at owner.Epoch; 0 when
// the fleet records no owner) by this worker. It brings the local copy up
// to date, and refuses a fork whose target already exists elsewhere.
func (h *handoff) before(ctx context.Context, req messages.Request, owner messages.Owner) *messages.Error {
	if req.Vault == "" || req.Namespace == "" {
		return nil
	}
	k := vkey{req.Namespace, req.Vault}
	h.mu.Lock()
	h.served[k] = struct{}{}
	h.mu.Unlock()
	h.reconcile(ctx, k, owner.Epoch, req.RequestID)
	if req.Op == messages.OpVaultFork {
		return h.checkTarget(ctx, req)
	}
	return nil
}

// reconcile makes the local copy of k the fleet's current one for owner
// epoch epoch. Errors are logged and leave the copy as it is; the request
// then runs on what the store has, and the next one tries again.
func (h *handoff) reconcile(ctx context.Context, k vkey, epoch int64, requestID string) {
	h.mu.Lock()
	e, ok := h.checked[k]
	h.mu.Unlock()
	if ok && e == epoch {
		return
	}
	log := h.s.log.With("namespace", k.ns, "vault", k.vault, "epoch", epoch)
	st := h.s.h.Store()
	exists, err := st.Vault(k.ns, k.vault).Exists(ctx)
	if err != nil {
		return
	}
	local := int64(0)
	if v, ok, err := st.Meta(ctx, epochKey(k)); err == nil && ok {
		local, _ = strconv.ParseInt(v, 10, 64)
	}
	if !exists || local != epoch {
		obs, err := h.store(ctx)
		if err != nil {
			log.Warn("handoff: object store", "err", err)
			return
		}
		info, err := obs.GetInfo(ctx, messages.ManifestObject(k.ns, k.vault))
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			log.Warn("handoff: manifest", "err", err)
			return
		}
		if err == nil && h.newer(info, exists, local) {
			if info.Metadata[messages.ObjectMetaDeleted] == "true" {
				if exists {
					// Deleted elsewhere after this copy was current.
					if err := st.Delete(ctx, k.ns, k.vault, vault.Meta{Actor: "worker:" + h.s.id, RequestID: requestID}); err != nil {
						log.Warn("handoff: drop deleted vault", "err", err)
						return
					}
					exists = false
				}
			} else {
				if err := h.pull(ctx, k, exists, requestID); err != nil {
					log.Warn("handoff pull", "err", err)
					return
				}
				exists = true
			}
		}
		if exists && epoch > 0 {
			if err := st.SetMeta(ctx, epochKey(k), strconv.FormatInt(epoch, 10)); err != nil {
				log.Warn("handoff: record epoch", "err", err)
				return
			}
		}
	}
	h.mu.Lock()
	h.checked[k] = epoch
	h.mu.Unlock()
}

// newer reports whether a pushed manifest supersedes the local copy (if
// exists) that was current at owner epoch local. A manifest pushed from
// this very store never does: the store has everything it had, and more.
// Two stores never push at one epoch (only its owner pushes), so a later
// epoch from another store means changes this copy has not seen.
func (h *handoff) newer(info *jetstream.ObjectInfo, exists bool, local int64) bool {
	if !exists {
		return true
	}
	if info.Metadata[messages.ObjectMetaStore] == h.storeID {
		return false
	}
	r, _ := strconv.ParseInt(info.Metadata[messages.ObjectMetaEpoch], 10, 64)
	return r > local
}

// checkTarget refuses a fork onto a vault name that another worker holds:
// its store cannot see that vault, so the fork would make a second one.
// The target's owner record names the request that placed it, which tells
// a fork's own placement (and its retries) from an existing vault.
func (h *handoff) checkTarget(ctx context.Context, req messages.Request) *messages.Error {
	var a messages.VaultForkArgs
	if json.Unmarshal(req.Args, &a) != nil || a.Target == "" {
		return nil // the handler answers the malformed request
	}
	o, ok, err := h.s.owned.Get(ctx, req.Namespace, a.Target)
	if err != nil || !ok || o.Worker == h.s.id || o.Request == req.RequestID {
		return nil
	}
	obs, err := h.store(ctx)
	if err != nil {
		return nil
	}
	info, err := obs.GetInfo(ctx, messages.ManifestObject(req.Namespace, a.Target))
	if err == nil && info.Metadata[messages.ObjectMetaDeleted] == "true" {
		return nil
	}
	return messages.Errorf(messages.CodeVaultExists, "vault %q already exists (on worker %s)", a.Target, o.Worker)
}

// pull fetches k's manifest and the chunks this store lacks, then imports
// it, in place of the local copy when replace.
func (h *handoff) pull(ctx context.Context, k vkey, replace bool, requestID string) error {
	obs, err := h.store(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "avfs-pull-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "manifest.db")
	name := messages.ManifestObject(k.ns, k.vault)
	if err := obs.GetFile(ctx, name, file); err != nil {
		return fmt.Errorf("download %s: %w", name, err)
	}
	st := h.s.h.Store()
	hs, err := vault.ManifestChunks(ctx, file)
	if err != nil {
		return err
	}
	missing, err := st.MissingChunks(ctx, hs)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	batch := map[vault.Hash][]byte{}
	var fetched int64
	flush := func() error { // under mu
		if err := st.PutChunks(ctx, batch); err != nil {
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
		data := e.Value()
		mu.Lock()
		defer mu.Unlock()
		batch[c] = data
		fetched += int64(len(data))
		if len(batch) >= 256 {
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
	meta := vault.Meta{Actor: "worker:" + h.s.id, RequestID: requestID}
	if replace {
		_, err = st.Replace(ctx, file, k.ns, k.vault, meta)
	} else if _, err = st.Import(ctx, file, k.ns, k.vault, meta); errors.Is(err, vault.ErrVaultExists) {
		err = nil // another process on this store imported it first
	}
	if err != nil {
		return err
	}
	// Every chunk of the manifest is in the bucket: this store need not
	// send them when it pushes the vault.
	if err := st.MarkSent(ctx, h.remote, hs); err != nil {
		return err
	}
	h.moved(ctx, "fetched", len(missing), fetched)
	h.s.log.Info("pulled vault", "namespace", k.ns, "vault", k.vault, "chunks", len(hs), "fetched", len(missing), "fetched_bytes", fetched, "replaced", replace)
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

// after runs once a request was handled, with the reply it got: it
// schedules the pushes the request calls for, and hands a fork placed on
// another worker over before the fork is answered.
func (h *handoff) after(ctx context.Context, req messages.Request, rep messages.Reply, owner messages.Owner) messages.Reply {
	if rep.Error != nil || req.Vault == "" || req.Namespace == "" {
		return rep
	}
	k := vkey{req.Namespace, req.Vault}
	if req.Op.Mutating() {
		h.mu.Lock()
		h.served[k] = struct{}{}
		h.dirty[k] = true
		h.mu.Unlock()
	}
	switch req.Op {
	case messages.OpVaultCreate, messages.OpVaultImport:
		h.current(ctx, k, owner.Epoch)
		h.schedule(k, pushAction{reason: string(req.Op)})
	case messages.OpCheckpointSave, messages.OpCheckpointRestore:
		var r messages.CheckpointResult // RestoreResult shares the field
		json.Unmarshal(rep.Result, &r)
		h.schedule(k, pushAction{reason: string(req.Op), checkpoint: r.Checkpoint.Name})
	case messages.OpVaultFork:
		var a messages.VaultForkArgs
		if json.Unmarshal(req.Args, &a) != nil || a.Target == "" {
			return rep
		}
		t := vkey{req.Namespace, a.Target}
		o, ok, err := h.s.owned.Get(ctx, req.Namespace, a.Target)
		if err != nil || !ok || o.Worker == h.s.id {
			h.mu.Lock()
			h.served[t] = struct{}{}
			h.dirty[t] = true
			h.mu.Unlock()
			h.current(ctx, t, o.Epoch)
			h.schedule(t, pushAction{reason: string(req.Op), checkpoint: a.Checkpoint})
			return rep
		}
		// Placed on another worker: it can serve the fork only once the
		// bucket has it. A failed push fails the fork for its caller; a
		// retry (same request id) pushes again.
		if err := h.sync(t, pushAction{seed: true, reason: string(req.Op), checkpoint: a.Checkpoint}); err != nil {
			h.s.log.Warn("handoff: fork for another worker", "vault", a.Target, "worker", o.Worker, "err", err)
			return messages.Reply{RequestID: rep.RequestID, Error: messages.Errorf(messages.CodeUnavailable,
				"fork %s made, but not handed over to its worker %s: %v; retry the request", a.Target, o.Worker, err)}
		}
		var r messages.ForkResult
		if json.Unmarshal(rep.Result, &r) == nil {
			r.Vault.Worker = o.Worker // where the fork now lives
			rep.Result, _ = json.Marshal(r)
		}
	case messages.OpVaultDelete:
		h.mu.Lock()
		delete(h.dirty, k)
		delete(h.served, k)
		delete(h.checked, k)
		h.mu.Unlock()
		h.schedule(k, pushAction{del: true, reason: string(req.Op)})
	}
	return rep
}

// current records that the local copy of k is current at owner epoch epoch
// (a vault this worker just made).
func (h *handoff) current(ctx context.Context, k vkey, epoch int64) {
	if epoch > 0 {
		if err := h.s.h.Store().SetMeta(ctx, epochKey(k), strconv.FormatInt(epoch, 10)); err != nil {
			h.s.log.Warn("handoff: record epoch", "namespace", k.ns, "vault", k.vault, "err", err)
			return
		}
	}
	h.mu.Lock()
	h.checked[k] = epoch
	h.mu.Unlock()
}

// schedule runs a for k in the background, after the job in flight for
// k if there is one.
func (h *handoff) schedule(k vkey, a pushAction) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if j, ok := h.jobs[k]; ok {
		if j.next != nil && !j.next.del && !a.del && a.checkpoint == "" {
			a.checkpoint = j.next.checkpoint
		}
		j.next = &a
		return
	}
	j := &pushJob{}
	h.jobs[k] = j
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			// A failed push is tried again a few times, unless a newer
			// one is queued meanwhile: it pushes the same vault anyway.
			for try, wait := 1, time.Second; ; try, wait = try+1, wait*2 {
				err := h.sync(k, a)
				if err == nil {
					break
				}
				h.s.log.Warn("handoff push", "namespace", k.ns, "vault", k.vault, "reason", a.reason, "try", try, "err", err)
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
}

// drain pushes, and waits for, every served vault changed since its last
// push; Run calls it when it ends gracefully.
func (h *handoff) drain() {
	h.mu.Lock()
	var ks []vkey
	for k := range h.served {
		if h.dirty[k] {
			ks = append(ks, k)
		}
	}
	h.mu.Unlock()
	for _, k := range ks {
		h.schedule(k, pushAction{reason: "drain"})
	}
	h.wg.Wait()
}

// sync pushes k: the chunks the bucket lacks, then the manifest (or the
// tombstone). Only the owner pushes, so a worker the vault was taken from
// cannot overwrite its new owner's copy.
func (h *handoff) sync(k vkey, a pushAction) error {
	ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
	defer cancel()
	obs, err := h.store(ctx)
	if err != nil {
		return err
	}
	o, known, err := h.s.owned.Get(ctx, k.ns, k.vault)
	if err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	if known && o.Worker != h.s.id && !a.seed {
		h.s.log.Info("handoff push skipped: not the owner", "namespace", k.ns, "vault", k.vault, "owner", o.Worker, "epoch", o.Epoch)
		return nil
	}
	now := time.Now().UTC()
	md := map[string]string{messages.ObjectMetaTime: now.Format(time.RFC3339Nano), messages.ObjectMetaWorker: h.s.id,
		messages.ObjectMetaReason: a.reason, messages.ObjectMetaStore: h.storeID, messages.ObjectMetaEpoch: strconv.FormatInt(o.Epoch, 10)}
	name := messages.ManifestObject(k.ns, k.vault)
	if a.del {
		md[messages.ObjectMetaDeleted] = "true"
		_, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: md}, bytes.NewReader(nil))
		return err
	}
	st := h.s.h.Store()
	if ok, err := st.Vault(k.ns, k.vault).Exists(ctx); err != nil || !ok {
		return err
	}
	h.mu.Lock()
	h.dirty[k] = false // a change from here on needs another push
	h.mu.Unlock()
	if err := h.push(ctx, obs, k, name, a, md); err != nil {
		h.mu.Lock()
		h.dirty[k] = true
		h.mu.Unlock()
		return err
	}
	return nil
}

func (h *handoff) push(ctx context.Context, obs jetstream.ObjectStore, k vkey, name string, a pushAction, md map[string]string) error {
	dir, err := os.MkdirTemp("", "avfs-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "manifest.db")
	st := h.s.h.Store()
	if _, err := st.ExportManifest(ctx, k.ns, k.vault, file); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	hs, err := vault.ManifestChunks(ctx, file)
	if err != nil {
		return err
	}
	unsent, err := st.Unsent(ctx, h.remote, hs)
	if err != nil {
		return err
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
		return err
	}
	h.moved(ctx, "sent", sent, sentBytes)
	if err := st.MarkSent(ctx, h.remote, unsent); err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	md[messages.ObjectMetaChunks] = strconv.Itoa(len(hs))
	if a.checkpoint != "" {
		md[messages.ObjectMetaCheckpoint] = a.checkpoint
	}
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: md}, f)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	h.s.log.Debug("pushed vault", "namespace", k.ns, "vault", k.vault, "manifest_bytes", info.Size, "chunks", len(hs), "sent", sent,
		"epoch", md[messages.ObjectMetaEpoch], "checkpoint", a.checkpoint, "reason", a.reason)
	return nil
}
