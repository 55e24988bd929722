package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// Cross-machine handoff. A vault's durable copy for failover is its
// export file (vault.Store.Export) in the object store
// messages.BucketVaults, under messages.ObjectName(ns, vault):
//
//   - push: after a successful vault.create, vault.import, vault.fork
//     (the target), checkpoint.save and checkpoint.restore, and for every
//     vault changed since its last push when Run ends gracefully. Pushes
//     run in the background, at most one per vault at a time; a change
//     during a push queues one more. vault.delete deletes the object.
//   - pull: a request for a vault this worker's store lacks imports the
//     object first (same name), then runs.
//
// The recovery point of a failover is therefore the vault's last push:
// changes after its last checkpoint (or create, fork, restore) are lost
// when its worker dies without stopping gracefully.

const pushTimeout = 2 * time.Minute

type vkey struct{ ns, vault string }

// pushAction is what a push job does for one vault.
type pushAction struct {
	del        bool   // delete the object instead of pushing
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
	dirty   map[vkey]bool // changed since its last push began
	present map[vkey]struct{}
	wg      sync.WaitGroup
	obs     jetstream.ObjectStore
}

func newHandoff(s *Server) *handoff {
	return &handoff{s: s, jobs: map[vkey]*pushJob{}, served: map[vkey]struct{}{}, dirty: map[vkey]bool{}, present: map[vkey]struct{}{}}
}

func (h *handoff) store(ctx context.Context) (jetstream.ObjectStore, error) {
	h.mu.Lock()
	obs := h.obs
	h.mu.Unlock()
	if obs != nil {
		return obs, nil
	}
	obs, err := h.s.js.ObjectStore(ctx, messages.BucketVaults)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.obs = obs
	h.mu.Unlock()
	return obs, nil
}

// before runs ahead of a request: it pulls the vault from the object
// store if the request needs one this worker's store lacks.
func (h *handoff) before(ctx context.Context, req messages.Request) {
	if !req.Op.NeedsVault() || req.Vault == "" || req.Namespace == "" {
		return
	}
	k := vkey{req.Namespace, req.Vault}
	h.mu.Lock()
	h.served[k] = struct{}{}
	_, ok := h.present[k]
	h.mu.Unlock()
	if ok {
		return
	}
	st := h.s.h.Store()
	exists, err := st.Vault(k.ns, k.vault).Exists(ctx)
	if err != nil {
		return // the handler reports it
	}
	if !exists {
		if !h.pull(ctx, k, req.RequestID) {
			return
		}
	}
	h.mu.Lock()
	h.present[k] = struct{}{}
	h.mu.Unlock()
}

// pull imports k's pushed copy, if there is one, and reports whether the
// vault now exists here.
func (h *handoff) pull(ctx context.Context, k vkey, requestID string) bool {
	log := h.s.log.With("namespace", k.ns, "vault", k.vault)
	obs, err := h.store(ctx)
	if err != nil {
		log.Warn("handoff pull: object store", "err", err)
		return false
	}
	name := messages.ObjectName(k.ns, k.vault)
	info, err := obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false
	}
	if err != nil {
		log.Warn("handoff pull", "err", err)
		return false
	}
	dir, err := os.MkdirTemp("", "avfs-pull-")
	if err != nil {
		log.Warn("handoff pull", "err", err)
		return false
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "vault.db")
	if err := obs.GetFile(ctx, name, file); err != nil {
		log.Warn("handoff pull: download", "err", err)
		return false
	}
	res, err := h.s.h.Store().Import(ctx, file, k.ns, k.vault, vault.Meta{Actor: "worker:" + h.s.id, RequestID: requestID})
	if errors.Is(err, vault.ErrVaultExists) {
		return true // another process on this store imported it first
	}
	if err != nil {
		log.Warn("handoff pull: import", "err", err)
		return false
	}
	log.Info("pulled vault", "bytes", res.Bytes, "pushed", info.Metadata[messages.ObjectMetaTime],
		"checkpoint", info.Metadata[messages.ObjectMetaCheckpoint], "epoch", info.Metadata[messages.ObjectMetaEpoch])
	return true
}

// after runs once a request was answered: it schedules the pushes (or
// the object deletion) the request calls for.
func (h *handoff) after(req messages.Request, rep messages.Reply) {
	if rep.Error != nil || req.Vault == "" || req.Namespace == "" {
		return
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
		h.schedule(k, pushAction{reason: string(req.Op)})
	case messages.OpCheckpointSave, messages.OpCheckpointRestore:
		var r messages.CheckpointResult // RestoreResult shares the field
		json.Unmarshal(rep.Result, &r)
		h.schedule(k, pushAction{reason: string(req.Op), checkpoint: r.Checkpoint.Name})
	case messages.OpVaultFork:
		var a messages.VaultForkArgs
		if json.Unmarshal(req.Args, &a) == nil && a.Target != "" {
			t := vkey{req.Namespace, a.Target}
			h.mu.Lock()
			h.served[t] = struct{}{}
			h.dirty[t] = true
			h.present[t] = struct{}{}
			h.mu.Unlock()
			h.schedule(t, pushAction{reason: string(req.Op), checkpoint: a.Checkpoint})
		}
	case messages.OpVaultDelete:
		h.mu.Lock()
		delete(h.present, k)
		delete(h.dirty, k)
		delete(h.served, k)
		h.mu.Unlock()
		h.schedule(k, pushAction{del: true, reason: string(req.Op)})
	}
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
			h.sync(k, a)
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

func (h *handoff) sync(k vkey, a pushAction) {
	ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
	defer cancel()
	log := h.s.log.With("namespace", k.ns, "vault", k.vault, "reason", a.reason)
	obs, err := h.store(ctx)
	if err != nil {
		log.Warn("handoff push: object store", "err", err)
		return
	}
	name := messages.ObjectName(k.ns, k.vault)
	if a.del {
		if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			log.Warn("handoff delete", "err", err)
		}
		return
	}
	// A worker the vault was taken from must not overwrite its new
	// owner's copy: push only as the owner (or when no owner is known).
	epoch := ""
	if kv, err := h.s.js.KeyValue(ctx, messages.BucketOwners); err == nil {
		if e, err := kv.Get(ctx, k.ns+"."+k.vault); err == nil {
			var o messages.Owner
			if json.Unmarshal(e.Value(), &o) == nil {
				if o.Worker != h.s.id {
					log.Info("handoff push skipped: not the owner", "owner", o.Worker, "epoch", o.Epoch)
					return
				}
				epoch = strconv.FormatInt(o.Epoch, 10)
			}
		}
	}
	st := h.s.h.Store()
	if ok, err := st.Vault(k.ns, k.vault).Exists(ctx); err != nil || !ok {
		return
	}
	h.mu.Lock()
	h.dirty[k] = false // a change from here on needs another push
	h.mu.Unlock()
	dir, err := os.MkdirTemp("", "avfs-push-")
	if err != nil {
		log.Warn("handoff push", "err", err)
		return
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "vault.db")
	now := time.Now().UTC()
	if _, err := st.Export(ctx, k.ns, k.vault, file); err != nil {
		h.markDirty(k)
		log.Warn("handoff push: export", "err", err)
		return
	}
	f, err := os.Open(file)
	if err != nil {
		h.markDirty(k)
		log.Warn("handoff push", "err", err)
		return
	}
	defer f.Close()
	md := map[string]string{messages.ObjectMetaTime: now.Format(time.RFC3339Nano), messages.ObjectMetaWorker: h.s.id, messages.ObjectMetaReason: a.reason}
	if epoch != "" {
		md[messages.ObjectMetaEpoch] = epoch
	}
	if a.checkpoint != "" {
		md[messages.ObjectMetaCheckpoint] = a.checkpoint
	}
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: md}, f)
	if err != nil {
		h.markDirty(k)
		log.Warn("handoff push", "err", err)
		return
	}
	log.Debug("pushed vault", "bytes", info.Size, "epoch", epoch, "checkpoint", a.checkpoint)
}

func (h *handoff) markDirty(k vkey) {
	h.mu.Lock()
	h.dirty[k] = true
	h.mu.Unlock()
}
