package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// The catalogs (messages/subjects.go): this worker describes the vaults
// it owns in BucketCatalog and the approvals it holds in BucketApprovals,
// from which the dispatcher answers vault.list and approval.list and
// routes approval ops. No worker asks another anything.
//
//   - Before answering vault.create, vault.import and vault.fork, the
//     entry of the new vault is written from the reply; before answering
//     vault.delete, it is deleted. A failed write fails the request
//     (UNAVAILABLE): its retry, same id, is answered from the request
//     log and writes again. So a vault is listed as soon as its creator
//     hears of it, and never after its deleter does.
//   - After any other change, and when this worker takes a vault over,
//     the vault is marked; shortly after (catalogDelay; at most once a
//     second per vault while it keeps changing), a flush rewrites the
//     marked entries from the store, by compare-and-set against the entry it
//     read, and only entries that exist: a flush that read a vault just
//     before it was deleted cannot bring its entry back.
//   - After a command is held and after every approval op, the
//     approval's entry is rewritten from the store.
//   - When Run starts, the vaults of the store that the fleet has placed
//     here, or nowhere, are marked or added (a store used in-process
//     before it served a fleet), and its approvals added if missing.

// catalogDelay gathers the changes of a burst into one rewrite per vault.
const catalogDelay = 100 * time.Millisecond

// catalogBusyEvery is how often, at most, a vault's entry is rewritten
// while it keeps changing: each rewrite reads the vault's totals and
// costs two round trips to the bucket, which under a stream of writes
// took about 5% of a worker's CPU at ten rewrites a second per vault.
const catalogBusyEvery = time.Second

type catalog struct {
	s *Server
	// vaults and approvals are nil until open, and stay nil in a fleet
	// set up without them (then nothing is written).
	vaults, approvals jetstream.KeyValue

	mu     sync.Mutex
	dirty  map[vkey]bool
	last   map[vkey]time.Time // when each vault's entry was last rewritten (within catalogBusyEvery)
	epochs map[vkey]int64     // the owner epoch under which this worker last marked each vault
	wake   chan struct{}
}

func newCatalog(s *Server) *catalog {
	return &catalog{s: s, dirty: map[vkey]bool{}, last: map[vkey]time.Time{}, epochs: map[vkey]int64{}, wake: make(chan struct{}, 1)}
}

// open finds the buckets.
func (c *catalog) open(ctx context.Context) error {
	v, err := c.s.js.KeyValue(ctx, messages.BucketCatalog)
	if err != nil {
		return err
	}
	a, err := c.s.js.KeyValue(ctx, messages.BucketApprovals)
	if err != nil {
		return err
	}
	c.vaults, c.approvals = v, a
	return nil
}

// touch marks k for the next flush.
func (c *catalog) touch(k vkey) {
	if c.vaults == nil {
		return
	}
	c.mu.Lock()
	c.dirty[k] = true
	c.mu.Unlock()
	signal(c.wake)
}

// run flushes marked vaults until ctx ends, then once more.
func (c *catalog) run(ctx context.Context) {
	if c.vaults == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			c.flush(context.WithoutCancel(ctx), true)
			return
		case <-c.wake:
		}
		t := time.NewTimer(catalogDelay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		c.flush(context.WithoutCancel(ctx), ctx.Err() != nil)
	}
}

// flush rewrites the entries of the marked vaults this worker owns; a
// vault rewritten less than catalogBusyEvery ago stays marked for a
// later flush, unless all.
func (c *catalog) flush(ctx context.Context, all bool) {
	now := time.Now()
	var later time.Duration
	c.mu.Lock()
	ks := make([]vkey, 0, len(c.dirty))
	for k := range c.dirty {
		if wait := catalogBusyEvery - now.Sub(c.last[k]); !all && wait > 0 {
			if later == 0 || wait < later {
				later = wait
			}
			continue
		}
		ks = append(ks, k)
		delete(c.dirty, k)
	}
	for k, t := range c.last {
		if now.Sub(t) >= catalogBusyEvery {
			delete(c.last, k)
		}
	}
	for _, k := range ks {
		c.last[k] = now
	}
	c.mu.Unlock()
	if later > 0 {
		time.AfterFunc(later, func() { signal(c.wake) })
	}
	for _, k := range ks {
		if err := c.refresh(ctx, k); err != nil {
			c.s.log.Warn("catalog: rewrite entry", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, telemetry.LogKeyErr, err)
			c.mu.Lock()
			c.dirty[k] = true // with the next flush
			c.mu.Unlock()
		}
	}
}

// refresh rewrites k's entry from the store, if the entry exists and
// this worker owns k (or the fleet placed it nowhere).
func (c *catalog) refresh(ctx context.Context, k vkey) error {
	if o, ok := c.s.owned.Cached(k.ns, k.vault); ok && o.Worker != c.s.id {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	key := messages.VaultKey(k.ns, k.vault)
	e, err := c.vaults.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil
	}
	if err != nil {
		return err
	}
	in, err := c.s.store.Vault(k.ns, k.vault).Info(ctx)
	if errors.Is(err, vault.ErrVaultNotFound) {
		return nil // deleted, or handed over and not pulled yet
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(c.info(in))
	if err != nil {
		return err
	}
	if _, err := c.vaults.Update(ctx, key, b, e.Revision()); err != nil && !revisionLost(err) {
		return err // (a lost compare-and-set: written meanwhile, by a create or a delete; theirs stands)
	}
	return nil
}

// revisionLost reports whether a KV compare-and-set found another
// revision than the one it expected.
func revisionLost(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

func (c *catalog) info(in vault.Info) messages.VaultInfo {
	v := handler.VaultInfo(in)
	v.Worker = c.s.id
	return v
}

// put writes v's entry now.
func (c *catalog) put(ctx context.Context, v messages.VaultInfo) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.vaults.Put(ctx, messages.VaultKey(v.Namespace, v.Name), b)
	return err
}

// has reports whether the catalog lists ns/name.
func (c *catalog) has(ctx context.Context, ns, name string) (bool, error) {
	if c.vaults == nil {
		return false, errors.New("no catalog")
	}
	_, err := c.vaults.Get(ctx, messages.VaultKey(ns, name))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// record updates the catalogs after call was served with res (or
// failed with served), before the reply is sent; owner is the vault's
// owner as the request was served. It returns res and served, or
// UNAVAILABLE when a vault that now exists (or no longer does) could not
// be written down.
func (c *catalog) record(ctx context.Context, call handler.Call, res any, served error, owner messages.Owner) (any, error) {
	req := call.Request
	if c.vaults == nil || req.Namespace == "" {
		return res, served
	}
	if messages.ApprovalOp(req.Op) {
		c.recordApproval(ctx, call, res, served)
		if req.Op == messages.OpApprovalGrant && req.Vault != "" {
			c.touch(vkey{req.Namespace, req.Vault}) // the command ran in it
		}
		return res, served
	}
	if served != nil || req.Vault == "" {
		return res, served
	}
	k := vkey{req.Namespace, req.Vault}
	unavailable := func(what string, err error) (any, error) {
		c.s.log.WarnContext(ctx, "catalog: write entry", telemetry.LogKeyNamespace, req.Namespace, telemetry.LogKeyVault, what, telemetry.LogKeyErr, err)
		return nil, messages.Errorf(messages.CodeUnavailable,
			"%s of vault %q done, but the vault catalog was not updated: %v; retry the request", req.Op, what, err)
	}
	var err error
	switch req.Op {
	case messages.OpVaultCreate:
		r, _ := res.(messages.VaultResult)
		err = c.put(ctx, r.Vault)
	case messages.OpVaultImport:
		r, _ := res.(messages.TransferResult)
		err = c.put(ctx, r.Vault)
	case messages.OpVaultFork:
		r, _ := res.(messages.ForkResult)
		if err = c.put(ctx, r.Vault); err != nil {
			return unavailable(r.Vault.Name, err)
		}
		if r.Vault.Worker == c.s.id {
			c.touch(vkey{req.Namespace, r.Vault.Name}) // its stored bytes
		}
	case messages.OpVaultDelete:
		if err = c.vaults.Delete(ctx, messages.VaultKey(req.Namespace, req.Vault)); err != nil {
			return unavailable(req.Vault, err)
		}
		c.mu.Lock()
		delete(c.epochs, k)
		c.mu.Unlock()
		return res, nil
	case messages.OpExec:
		if env, ok := res.(messages.Envelope); ok && env.Status == messages.StatusApprovalRequired && env.ApprovalID != nil {
			c.indexApproval(ctx, req.Namespace, *env.ApprovalID)
		}
	}
	if err != nil {
		return unavailable(req.Vault, err)
	}
	c.mu.Lock()
	takeover := owner.Worker == c.s.id && c.epochs[k] != owner.Epoch
	c.epochs[k] = owner.Epoch
	c.mu.Unlock()
	if takeover || req.Op.Mutating() {
		c.touch(k)
	}
	return res, nil
}

// recordApproval rewrites the entry of the approval an approval op
// named: from its result, or, after an error (a grant that found it
// expired, a command that failed), from the store.
func (c *catalog) recordApproval(ctx context.Context, call handler.Call, res any, err error) {
	if r, ok := res.(messages.ApprovalResult); ok && err == nil && r.Approval.ID != "" {
		c.putApproval(ctx, r.Approval, false)
		return
	}
	if a, ok := call.Args.(messages.ApprovalArgs); ok && a.ID != "" {
		c.indexApproval(ctx, call.Request.Namespace, a.ID)
	}
}

// indexApproval writes approval id's entry as the store has it; one the
// store lacks is left alone.
func (c *catalog) indexApproval(ctx context.Context, ns, id string) {
	if a, ok := c.showApproval(ctx, ns, id); ok {
		c.putApproval(ctx, a, false)
	}
}

// showApproval reads approval id of ns through the handler.
func (c *catalog) showApproval(ctx context.Context, ns, id string) (messages.Approval, bool) {
	res, err := c.s.h.Serve(ctx, handler.Call{Request: messages.Request{Op: messages.OpApprovalShow, Namespace: ns}, Args: messages.ApprovalArgs{ID: id}})
	r, ok := res.(messages.ApprovalResult)
	if err != nil || !ok {
		return messages.Approval{}, false
	}
	return r.Approval, true
}

// putApproval writes a's entry, without its envelope; onlyNew keeps an
// entry that exists.
func (c *catalog) putApproval(ctx context.Context, a messages.Approval, onlyNew bool) {
	key, ok := messages.ApprovalKey(a.Namespace, a.ID)
	if !ok {
		return
	}
	a.Envelope = nil
	b, err := json.Marshal(a)
	if err == nil {
		if onlyNew {
			_, err = c.approvals.Create(ctx, key, b)
			if errors.Is(err, jetstream.ErrKeyExists) {
				err = nil
			}
		} else {
			_, err = c.approvals.Put(ctx, key, b)
		}
	}
	if err != nil {
		c.s.log.WarnContext(ctx, "catalog: write approval", "approval", a.ID, telemetry.LogKeyErr, err)
	}
}

// seed brings the catalogs up to what the store holds when Run starts.
func (c *catalog) seed(ctx context.Context) {
	if c.vaults == nil {
		return
	}
	st := c.s.store
	nss, err := st.Namespaces(ctx)
	if err != nil {
		c.s.log.Warn("catalog: namespaces", telemetry.LogKeyErr, err)
		return
	}
	for _, ns := range nss {
		ins, err := st.List(ctx, ns)
		if err != nil {
			c.s.log.Warn("catalog: list", telemetry.LogKeyNamespace, ns, telemetry.LogKeyErr, err)
			continue
		}
		for _, in := range ins {
			o, placed := c.s.owned.Cached(ns, in.Name)
			switch {
			case placed && o.Worker == c.s.id:
				c.touch(vkey{ns, in.Name})
			case !placed:
				// Only onto a key never written: a deleted vault's
				// key keeps its delete marker, so a copy listed just
				// before a delete does not come back.
				b, err := json.Marshal(c.info(in))
				if err == nil {
					_, err = c.vaults.Update(ctx, messages.VaultKey(ns, in.Name), b, 0)
				}
				if err != nil && !revisionLost(err) {
					c.s.log.Warn("catalog: add vault", telemetry.LogKeyNamespace, ns, telemetry.LogKeyVault, in.Name, telemetry.LogKeyErr, err)
				}
			}
		}
		as, err := st.Approvals(ctx, ns)
		if err != nil {
			c.s.log.Warn("catalog: approvals", telemetry.LogKeyNamespace, ns, telemetry.LogKeyErr, err)
			continue
		}
		for _, a := range as {
			if w, ok := c.showApproval(ctx, ns, a.ID); ok {
				c.putApproval(ctx, w, true)
			}
		}
	}
}
