package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Replication at acknowledgement (docs/decisions.md §30, the stream in
// messages/replog.go). A change to a vault this worker owns is answered
// only once JetStream holds it:
//
//   - a request the handler can replay (file writes, mkdir, rm, mv, cp,
//     ln, checkpoints, history, settings, quota...) is appended to the
//     vault's change log as the request itself, with its result and the
//     time its transactions used;
//   - a change the log cannot replay (an exec's effects, a create, an
//     import, a merge, a fork's target, a change too large for one
//     entry) appends a snapshot entry, then pushes the vault's snapshot
//     (handoff.sync) naming that entry as Head.LogSeq, before the reply.
//
// Every append expects the sequence of the last entry this owner knows
// (Nats-Expected-Last-Subject-Sequence): a worker that lost the vault
// (a new owner appended its epoch entry) gets a wrong-sequence error and
// answers UNAVAILABLE instead of acknowledging.
//
// Takeover (take, called by reconcile): the local copy is reused only
// when the store records that it equals the log at some sequence (the
// vault's id and change sequence, vault.LogPos, noted with the log
// sequence after each append) at or after the head's; otherwise the
// head's snapshot is pulled. Then every entry after it is applied, and
// the epoch entry appended.

// maxEntry is the largest change log entry; a bigger change is kept by a
// snapshot instead.
const maxEntry = 1 << 20

// snapshotEvery is how many entries a vault's log may gather before its
// owner pushes a snapshot in the background, after which the log is
// trimmed: a takeover then replays at most about this many.
const snapshotEvery = 5000

// takeoverSnapshot is how many entries a takeover may replay before the
// new owner pushes a snapshot at once: replaying costs about 1 ms an
// entry on a loaded 2-core machine, and the next failover would replay
// them all again (the kill test's takeovers took 3 s by its 20th round
// without it).
const takeoverSnapshot = 500

var (
	// errLostVault: another worker appended to the vault's log; this
	// one is no longer its owner.
	errLostVault = errors.New("another worker owns the vault now")
	// errNotTaken: this worker has not read the vault's log under its
	// current ownership, so it cannot append.
	errNotTaken = errors.New("the vault's change log was not taken over by this worker")
)

// changelog appends to and replays the fleet's change log.
type changelog struct {
	s *Server
	// st is all of the store the log touches: positions in store meta,
	// a vault's change sequence and settings, dropping a copy.
	st     copyStore
	mu     sync.Mutex
	stream jetstream.Stream // nil: the fleet has no log (set up by an older version)
	// last is, per vault this worker took over, the sequence of the
	// vault's last log entry: the next append expects it.
	last map[vkey]uint64
	// since counts the entries appended since the vault's last snapshot.
	since map[vkey]int
	// locks is held from a change's handling to its append, and by a
	// snapshot's export: the export then includes exactly the changes
	// logged up to the sequence it names.
	locks map[vkey]*sync.Mutex
	// pos caches the local positions this worker recorded; unflushed
	// holds those not yet written to the store (flushLoop writes them
	// within flushEvery: a crash before loses only the proof, and the
	// takeover then pulls the snapshot instead of reusing the copy).
	pos       map[vkey]localPos
	unflushed map[vkey]localPos
	// modes caches vaults' replication modes (vault settings; the
	// head's at a takeover).
	modes map[vkey]string
	// lapsed holds the vaults forgotten after a failed append or head
	// move: the catch-up loop takes them again while this worker still
	// owns them (retake), so that writes through a mount, which make no
	// request, are held again without waiting for one.
	lapsed map[vkey]struct{}
}

// flushEvery is how often recorded local positions reach the store.
const flushEvery = 100 * time.Millisecond

func newChangelog(s *Server) *changelog {
	return &changelog{s: s, st: s.store, last: map[vkey]uint64{}, since: map[vkey]int{}, locks: map[vkey]*sync.Mutex{},
		pos: map[vkey]localPos{}, unflushed: map[vkey]localPos{}, modes: map[vkey]string{}, lapsed: map[vkey]struct{}{}}
}

// openWait bounds how long a starting worker waits for the log stream
// to answer.
const openWait = 2 * time.Minute

// open finds the log stream. Only a fleet set up without one (an older
// version) runs without it, replicating at pushes only. Any other error
// is tried again for up to openWait and then returned: a worker that
// served without its log would acknowledge changes no log holds (a
// cluster electing leaders answers with timeouts for a while).
func (l *changelog) open(ctx context.Context) error {
	deadline := time.Now().Add(openWait)
	for {
		st, err := l.s.js.Stream(ctx, messages.StreamLog)
		switch {
		case err == nil:
			l.mu.Lock()
			l.stream = st
			l.mu.Unlock()
			return nil
		case errors.Is(err, jetstream.ErrStreamNotFound):
			l.s.log.Warn("change log disabled: changes are replicated only by pushes", "stream", messages.StreamLog, telemetry.LogKeyErr, err)
			return nil
		case ctx.Err() != nil || time.Now().After(deadline):
			return fmt.Errorf("change log stream %s: %w", messages.StreamLog, err)
		}
		l.s.log.Warn("change log stream not answering yet, trying again", "stream", messages.StreamLog, telemetry.LogKeyErr, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("change log stream %s: %w", messages.StreamLog, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func (l *changelog) lock(k vkey) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.locks[k]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[k] = m
	}
	return m
}

// heldKey marks a context whose caller holds a vault's log lock.
type heldKey struct{}

func held(ctx context.Context, k vkey) bool {
	h, _ := ctx.Value(heldKey{}).(vkey)
	return h == k
}

// kind says how a successful request's change is kept.
type changeKind int

const (
	changeNone     changeKind = iota // nothing to keep (a read, a delete: its tombstone)
	changeLog                        // an entry replayed through the handler
	changeSnapshot                   // a snapshot pushed before the reply
)

func kindOf(op messages.Op) changeKind {
	switch {
	case !op.Mutating():
		return changeNone
	}
	switch op {
	case messages.OpVaultDelete, messages.OpRunStart, messages.OpRunKill, messages.OpMountStart,
		messages.OpApprovalDeny, messages.OpApprovalGrant, messages.OpTransferOpen, messages.OpVaultPush:
		// A delete is kept by its tombstone (handoff.afterDelete); a
		// background run by the snapshot pushed when it ends; a grant by
		// the snapshot of its held vault (grant.go).
		return changeNone
	case messages.OpExec, messages.OpVaultCreate, messages.OpVaultImport, messages.OpVaultFork, messages.OpVaultMerge, messages.OpImportDir:
		return changeSnapshot
	case messages.OpMountStop:
		// The writes made through a worker's mount (mount.start) are
		// committed to its store at close and fsync, outside the log: an
		// fsync pushes a snapshot before it returns (mountsync.go), else
		// the next snapshot keeps them (the catch-up loop, or the vault's
		// next logged change, which sees the copy ahead of the log).
		// Ending the mount pushes one before its reply.
		return changeSnapshot
	}
	return changeLog
}

// serve runs handle for c, on a vault owned at owner, and keeps its
// change as the vault's replication mode says: in sync mode before it
// returns (a result that says done is returned only for a change
// JetStream holds); in async mode, when mayDefer and the caller sends a
// reply of its own (deferAfterReply), once that reply is sent; in
// checkpoint mode not at all (the pushes keep it).
func (l *changelog) serve(ctx context.Context, c handler.Call, owner messages.Owner, mayDefer bool, handle func(context.Context) (any, error)) (any, error) {
	req := c.Request
	kind := kindOf(req.Op)
	k := vkey{req.Namespace, req.Vault}
	if kind == changeNone || req.Vault == "" || req.Namespace == "" || owner.Worker != l.s.id || !l.streamOn() {
		return handle(ctx)
	}
	fresh := req.Op == messages.OpVaultCreate || req.Op == messages.OpVaultImport || req.Op == messages.OpVaultSet
	before := l.mode(ctx, k)
	if before == vault.ReplicationCheckpoint && !fresh && req.Op != messages.OpVaultFork {
		return handle(ctx)
	}
	m := l.lock(k)
	m.Lock()
	ctx = context.WithValue(ctx, heldKey{}, k)
	now := time.Now().UTC()
	hctx := ctx
	var span *vault.SeqSpan
	if kind == changeLog {
		// The entry carries the time; its replay uses it too. The span
		// tells logOp where the request's transactions took the vault
		// from and to, without reading the store again.
		hctx, span = vault.RecordSeqs(vault.WithTime(ctx, now), k.ns, k.vault)
	} else if req.Op == messages.OpExec {
		hctx, span = vault.RecordSeqs(ctx, k.ns, k.vault) // (keepExec)
	}
	res, err := handle(hctx)
	if err != nil {
		// A failed request changes nothing; should it have (a run that
		// failed halfway), the change is unlogged and the next snapshot
		// or takeover settles it.
		m.Unlock()
		return res, err
	}
	mode := before
	if fresh {
		l.dropMode(k)
		mode = l.mode(ctx, k)
	}
	var commit func() error
	switched := req.Op == messages.OpVaultSet && mode != before
	switch {
	case switched:
		// (Never deferred: the next owner learns the mode from it.)
		commit = func() error { return l.switchMode(ctx, k, mode) }
	case mode == vault.ReplicationCheckpoint && req.Op != messages.OpVaultFork:
		m.Unlock()
		return res, nil
	case kind == changeLog:
		commit = func() error { return l.logOp(ctx, k, req, c.Args, res, owner, now, span) }
	case req.Op == messages.OpExec:
		commit = func() error { return l.keepExec(ctx, c, res, owner, mode, span) }
	default:
		commit = func() error { return l.snapshotFor(ctx, c, owner, mode) }
	}
	if mode == vault.ReplicationAsync && mayDefer && !switched {
		if deferAfterReply(ctx, func() {
			defer m.Unlock()
			if err := commit(); err != nil {
				l.s.log.WarnContext(ctx, "change acknowledged (async replication) but not replicated", telemetry.LogKeyVault, req.Vault, telemetry.LogKeyRequest, req.RequestID, telemetry.LogKeyErr, err)
			}
		}) {
			return res, nil
		}
	}
	err = commit()
	m.Unlock()
	if err != nil {
		l.s.log.WarnContext(ctx, "change not replicated: not acknowledged", telemetry.LogKeyVault, req.Vault, telemetry.LogKeyRequest, req.RequestID, telemetry.LogKeyErr, err)
		return nil, messages.Errorf(messages.CodeUnavailable,
			"vault %q: the change was not replicated on worker %s (%v), so it is not acknowledged; retry with the same request id", req.Vault, l.s.id, err)
	}
	return res, nil
}

// switchMode keeps a change of k's replication mode to mode: a snapshot
// that holds everything, and names the mode for the next owner
// (Head.Replication). Into a logged mode from checkpoint, this worker
// starts appending where the log ends; into checkpoint it stops.
func (l *changelog) switchMode(ctx context.Context, k vkey, mode string) error {
	l.mu.Lock()
	_, taken := l.last[k]
	l.mu.Unlock()
	if !taken {
		if err := l.start(ctx, k); err != nil {
			return err
		}
	}
	err := l.snapshot(ctx, k, "replication")
	if mode == vault.ReplicationCheckpoint {
		l.mu.Lock()
		delete(l.last, k)
		l.mu.Unlock()
	}
	return err
}

// streamOn reports whether the fleet has a change log.
func (l *changelog) streamOn() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stream != nil
}

// mode is k's replication mode as this worker knows it: cached, else
// its local copy's setting (sync when it has none).
func (l *changelog) mode(ctx context.Context, k vkey) string {
	l.mu.Lock()
	m, ok := l.modes[k]
	on := l.stream != nil
	l.mu.Unlock()
	if !on {
		return vault.ReplicationCheckpoint
	}
	if ok {
		return m
	}
	e, err := l.st.Vault(k.ns, k.vault).Settings(ctx)
	if err != nil {
		return vault.ReplicationSync // (not kept: the vault may not exist yet)
	}
	l.setMode(k, e.Replication)
	return e.Replication
}

func (l *changelog) setMode(k vkey, m string) {
	l.mu.Lock()
	l.modes[k] = m
	l.mu.Unlock()
}

func (l *changelog) dropMode(k vkey) {
	l.mu.Lock()
	delete(l.modes, k)
	l.mu.Unlock()
}

// logged reports whether k's changes go to the change log.
func (l *changelog) logged(ctx context.Context, k vkey) bool {
	return l.mode(ctx, k) != vault.ReplicationCheckpoint
}

// logOp appends req's entry, or takes a snapshot when the entry would be
// too large, or when the copy had changes the log does not hold before
// req (span: where req's transactions took it from and to), which the
// entry's replay would miss. args is req's decoded args (handler.Call),
// nil when the caller has none.
func (l *changelog) logOp(ctx context.Context, k vkey, req messages.Request, args any, res any, owner messages.Owner, now time.Time, span *vault.SeqSpan) error {
	pre, pos, spanned := span.Span()
	if !spanned {
		// No transaction of req's (a retry answered from the request
		// log), or not one run of them: the store says where it is, and
		// anything but "unchanged" is kept by a snapshot.
		var err error
		if pos, err = l.st.Vault(k.ns, k.vault).ChangeSeq(ctx); err != nil {
			return err
		}
		pre = vault.LogPos{Vault: -1}
	}
	lp, ok := l.local(ctx, k)
	if ok && lp.pos == pos {
		return nil // nothing changed (a retry answered from the request log)
	}
	if !ok || lp.pos != pre {
		return l.snapshot(ctx, k, string(req.Op))
	}
	// The entry is a wire edge of its own: the result is encoded for it,
	// and so are the args, from the values the handler decoded them into
	// (the replay decodes them into the same values, and hashes them
	// alike). Encoding a 1 KiB write's args costs a base64 pass; putting
	// the request's raw args in through json.Marshal cost a validating
	// scan of every byte (messages.EncodeEntry).
	result, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if args != nil {
		if req.Args, err = json.Marshal(args); err != nil {
			return err
		}
	} else if len(bytes.TrimSpace(req.Args)) > 0 && !json.Valid(req.Args) {
		return fmt.Errorf("change log entry of %s: args are not JSON", req.Op)
	}
	e := messages.ChangeEntry{Kind: messages.LogOp, Epoch: owner.Epoch, Worker: l.s.id, Time: now.Format(time.RFC3339Nano), Request: &req, Result: result}
	b, err := messages.EncodeEntry(e)
	if err != nil {
		return err
	}
	if len(b) > maxEntry || bytes.Contains(req.Args, []byte(`"content_object"`)) || bytes.Contains(req.Args, []byte(`"object"`)) {
		// Too large for an entry, or content in a transfer object a
		// replay later may not find: a snapshot keeps it.
		return l.snapshot(ctx, k, string(req.Op))
	}
	return l.appendAt(ctx, k, b, pos)
}

// appendAt appends b, an entry of a request on k that holds k's log lock
// and took k's copy to pos, records that the copy at pos equals the log
// there, and pushes a snapshot (trimming the log) every snapshotEvery
// entries. The request's slot of the worker's concurrency (Server.sem)
// is for work, not for waiting on JetStream: another vault's request
// runs meanwhile. (The vault's own requests wait on its lock.)
func (l *changelog) appendAt(ctx context.Context, k vkey, b []byte, pos vault.LogPos) error {
	<-l.s.sem
	seq, err := l.append(ctx, k, b)
	l.s.sem <- struct{}{}
	if err != nil {
		return err
	}
	l.record(ctx, k, pos, seq)
	l.mu.Lock()
	l.since[k]++
	n := l.since[k]
	if n >= snapshotEvery {
		l.since[k] = 0
	}
	l.mu.Unlock()
	if n >= snapshotEvery {
		l.s.ho.schedule(k, pushAction{reason: "log"})
	}
	return nil
}

// snapshotFor keeps a change the log cannot replay: the snapshot of the
// vault it made or changed.
func (l *changelog) snapshotFor(ctx context.Context, c handler.Call, owner messages.Owner, mode string) error {
	req := c.Request
	k := vkey{req.Namespace, req.Vault}
	switch req.Op {
	case messages.OpVaultCreate, messages.OpVaultImport:
		// A new vault: its log starts where the subject's ends (a vault
		// of that name deleted before left its tail there).
		if err := l.start(ctx, k); err != nil {
			return err
		}
		l.s.ho.current(ctx, k, owner.Epoch)
	case messages.OpVaultFork:
		a, _ := c.Args.(messages.VaultForkArgs)
		if a.Target == "" {
			return nil
		}
		t := vkey{req.Namespace, a.Target}
		o, ok, err := l.s.owned.Get(ctx, req.Namespace, a.Target)
		if err != nil {
			return err
		}
		if ok && o.Worker != l.s.id {
			return nil // handed over before the reply (handoff.afterFork)
		}
		l.dropMode(t)
		if !l.logged(ctx, t) {
			return nil // pushed in the background (handoff.afterFork)
		}
		if err := l.start(ctx, t); err != nil {
			return err
		}
		l.s.ho.current(ctx, t, o.Epoch)
		tm := l.lock(t)
		tm.Lock()
		defer tm.Unlock()
		return l.snapshot(context.WithValue(ctx, heldKey{}, t), t, string(req.Op))
	}
	if mode == vault.ReplicationCheckpoint {
		return nil
	}
	return l.snapshot(ctx, k, string(req.Op))
}

// keepResult appends the request log row of req, a request on k that
// this worker served and whose change is kept elsewhere (a fork), as a
// LogResult entry: the next owner of k answers a retry of req from it. A
// vault whose changes are not logged, or a request without an id, needs
// none.
func (l *changelog) keepResult(ctx context.Context, k vkey, req messages.Request, argsHash string) error {
	if req.RequestID == "" || !l.streamOn() || !l.logged(ctx, k) {
		return nil
	}
	raw, ok, err := l.st.StoredResult(ctx, vault.RequestKey{Namespace: k.ns, Vault: k.vault, ID: req.RequestID, Op: string(req.Op), ArgsHash: argsHash})
	if err != nil || !ok {
		return err
	}
	m := l.lock(k)
	m.Lock()
	defer m.Unlock()
	o, _ := l.s.owned.Cached(k.ns, k.vault)
	e := messages.ChangeEntry{Kind: messages.LogResult, Epoch: o.Epoch, Worker: l.s.id, Time: time.Now().UTC().Format(time.RFC3339Nano),
		Request: &req, Result: raw, ArgsHash: argsHash}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = l.append(ctx, k, b)
	return err
}

// snapshot pushes k now (its caller holds k's lock) and fails unless the
// head names it.
func (l *changelog) snapshot(ctx context.Context, k vkey, reason string) error {
	pushed, err := l.s.ho.sync(ctx, k, pushAction{reason: reason})
	if err != nil {
		return err
	}
	if !pushed {
		return fmt.Errorf("snapshot of %s/%s not pushed: %w", k.ns, k.vault, errLostVault)
	}
	return nil
}

// start makes this worker the appender of a vault it just made.
func (l *changelog) start(ctx context.Context, k vkey) error {
	seq, err := l.lastSeq(ctx, k)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.last[k] = seq
	l.since[k] = 0
	l.mu.Unlock()
	return nil
}

// lastSeq is the sequence of k's last log entry, 0 when it has none.
func (l *changelog) lastSeq(ctx context.Context, k vkey) (uint64, error) {
	m, err := l.stream.GetLastMsgForSubject(ctx, messages.LogSubject(k.ns, k.vault))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("change log of %s/%s: %w", k.ns, k.vault, err)
	}
	return m.Sequence, nil
}

// append adds an entry to k's log, fenced by the sequence this owner
// expects last. Any failure forgets k's position: the change may or may
// not be held, and only a takeover (reconcile) can tell.
func (l *changelog) append(ctx context.Context, k vkey, b []byte) (uint64, error) {
	l.mu.Lock()
	last, ok := l.last[k]
	l.mu.Unlock()
	if !ok {
		l.forget(k)
		return 0, errNotTaken
	}
	// (The header key is in canonical form already: no Header.Set.)
	msg := &nats.Msg{Subject: messages.LogSubject(k.ns, k.vault), Data: b,
		Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(last, 10)}}}
	ack, err := l.s.js.PublishMsg(ctx, msg)
	if err != nil {
		l.forget(k)
		if wrongSeq(err) {
			return 0, fmt.Errorf("append to the change log of %s/%s: %w", k.ns, k.vault, errLostVault)
		}
		return 0, fmt.Errorf("append to the change log of %s/%s: %w", k.ns, k.vault, err)
	}
	l.mu.Lock()
	l.last[k] = ack.Sequence
	l.mu.Unlock()
	return ack.Sequence, nil
}

// wrongSeq reports a failed expected-last-sequence check.
func wrongSeq(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// forget drops what this worker knows of k's log and ownership: the next
// request for k reconciles (and finds whether it still owns it). The
// recorded position stays: that the copy at pos equalled the log up to
// seq is still true, and it is what lets the takeover tell a copy ahead
// of the log (the append never landed: keep the copy, push a snapshot)
// from one apart from it (it landed: pull). Without it the takeover
// pulled the last snapshot over the copy, and a mount's writes since
// then were gone from under the mount.
func (l *changelog) forget(k vkey) {
	l.mu.Lock()
	delete(l.last, k)
	delete(l.since, k)
	delete(l.modes, k)
	l.lapsed[k] = struct{}{}
	l.mu.Unlock()
	l.s.ho.mu.Lock()
	delete(l.s.ho.checked, k)
	l.s.ho.mu.Unlock()
}

// localPos is what the store records of its copy of a vault: it equals
// the vault's log up to seq while the vault's LogPos is pos.
type localPos struct {
	pos vault.LogPos
	seq uint64
}

func logPosKey(k vkey) string { return "log_pos." + k.ns + "/" + k.vault }

func (l *changelog) local(ctx context.Context, k vkey) (localPos, bool) {
	l.mu.Lock()
	p, ok := l.pos[k]
	l.mu.Unlock()
	if ok {
		return p, true
	}
	v, ok, err := l.st.Meta(ctx, logPosKey(k))
	if err != nil || !ok {
		return localPos{}, false
	}
	if _, err := fmt.Sscanf(v, "%d:%d:%d", &p.pos.Vault, &p.pos.Seq, &p.seq); err != nil {
		return localPos{}, false
	}
	return p, true
}

// record notes that the local copy of k, at pos, equals its log up to
// seq; the store learns it within flushEvery.
func (l *changelog) record(ctx context.Context, k vkey, pos vault.LogPos, seq uint64) {
	p := localPos{pos: pos, seq: seq}
	l.mu.Lock()
	l.pos[k] = p
	l.unflushed[k] = p
	l.mu.Unlock()
}

// flushLoop writes the recorded positions to the store until ctx ends,
// then once more.
func (l *changelog) flushLoop(ctx context.Context) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			l.flush(ctx)
		}
	}
}

func (l *changelog) flush(ctx context.Context) {
	l.mu.Lock()
	ps := l.unflushed
	l.unflushed = map[vkey]localPos{}
	l.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	// One transaction for all: each takes the store's writer, and ends
	// the writers' group commit.
	kv := make(map[string]string, len(ps))
	for k, p := range ps {
		kv[logPosKey(k)] = fmt.Sprintf("%d:%d:%d", p.pos.Vault, p.pos.Seq, p.seq)
	}
	if err := l.st.SetMetas(ctx, kv); err != nil {
		l.s.log.Warn("change log: record positions (a takeover here pulls the snapshot)", "vaults", len(kv), telemetry.LogKeyErr, err)
	}
}

// pin is a snapshot's position in the log, taken before its export.
type pin struct {
	k      vkey
	seq    uint64
	pos    vault.LogPos
	marked bool // a snapshot entry was appended for it
	unlock func()
}

// pin fixes the log sequence a snapshot of k about to be exported
// includes, and holds k's lock until its unlock is called (after the
// export). When the copy has changes the log does not hold (an exec's,
// a background run's), it appends a snapshot entry first: the snapshot
// is then the log's state at that entry.
func (l *changelog) pin(ctx context.Context, k vkey, reason string) (*pin, error) {
	p := &pin{k: k, unlock: func() {}}
	if !l.logged(ctx, k) {
		return p, nil
	}
	if !held(ctx, k) {
		m := l.lock(k)
		m.Lock()
		p.unlock = m.Unlock
	}
	fail := func(err error) (*pin, error) {
		p.unlock()
		return nil, err
	}
	pos, err := l.st.Vault(k.ns, k.vault).ChangeSeq(ctx)
	if err != nil {
		return fail(err)
	}
	p.pos = pos
	if lp, ok := l.local(ctx, k); ok && lp.pos == pos {
		p.seq = lp.seq
		l.mu.Lock()
		_, taken := l.last[k]
		l.mu.Unlock()
		if taken {
			return p, nil
		}
	}
	o, _ := l.s.owned.Cached(k.ns, k.vault)
	e := messages.ChangeEntry{Kind: messages.LogSnapshot, Epoch: o.Epoch, Worker: l.s.id, Time: time.Now().UTC().Format(time.RFC3339Nano), Reason: reason}
	b, _ := json.Marshal(e)
	seq, err := l.append(ctx, k, b)
	if err != nil {
		return fail(err)
	}
	p.seq, p.marked = seq, true
	return p, nil
}

// landed runs once the head names p's snapshot: the local copy equals
// the log at p.seq if nothing changed since, and the log before p.seq is
// no longer needed.
func (l *changelog) landed(ctx context.Context, p *pin) {
	if p == nil || p.seq == 0 {
		return
	}
	if p.marked {
		if !held(ctx, p.k) {
			m := l.lock(p.k)
			m.Lock()
			defer m.Unlock()
		}
		pos, err := l.st.Vault(p.k.ns, p.k.vault).ChangeSeq(ctx)
		if lp, ok := l.local(ctx, p.k); err == nil && pos == p.pos && (!ok || lp.seq < p.seq) {
			l.record(ctx, p.k, pos, p.seq)
		}
	}
	l.mu.Lock()
	l.since[p.k] = 0
	l.mu.Unlock()
	// Keep the entry p.seq itself: the subject's last sequence must stay
	// what its owner expects.
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(messages.LogSubject(p.k.ns, p.k.vault)), jetstream.WithPurgeSequence(p.seq)); err != nil {
		l.s.log.Warn("change log: trim", telemetry.LogKeyVault, p.k.vault, telemetry.LogKeyErr, err)
	}
}

// dropped forgets a deleted vault's log, once its tombstone is pushed.
func (l *changelog) dropped(ctx context.Context, k vkey) {
	if !l.streamOn() {
		return
	}
	l.mu.Lock()
	delete(l.last, k)
	delete(l.since, k)
	delete(l.pos, k)
	delete(l.unflushed, k)
	delete(l.lapsed, k)
	l.mu.Unlock()
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(messages.LogSubject(k.ns, k.vault))); err != nil {
		l.s.log.Warn("change log: drop a deleted vault's log", telemetry.LogKeyVault, k.vault, telemetry.LogKeyErr, err)
	}
	if err := l.st.SetMeta(ctx, logPosKey(k), "0:0:0"); err != nil {
		l.s.log.Warn("change log: drop position", telemetry.LogKeyVault, k.vault, telemetry.LogKeyErr, err)
	}
}

// take makes the local copy of k the log's state and this worker its
// appender at owner epoch epoch (reconcile holds k's reconcile lock). hd
// is k's head (ok false: none). It reports whether the vault exists here
// after it.
func (l *changelog) take(ctx context.Context, k vkey, epoch int64, hd messages.Head, ok bool, requestID string) (exists bool, err error) {
	h := l.s.ho
	st := l.st
	v := st.Vault(k.ns, k.vault)
	if exists, err = v.Exists(ctx); err != nil {
		return false, err
	}
	var from uint64
	lp, recorded := l.local(ctx, k)
	valid, ahead := false, false
	if exists && recorded && (!ok || lp.seq >= hd.LogSeq) {
		pos, err := v.ChangeSeq(ctx)
		if err != nil {
			return false, err
		}
		valid = pos == lp.pos
		if !valid {
			// The copy changed outside the fleet since its last append
			// (a local command on this store while the worker was down,
			// or a change whose append never happened). If nothing was
			// appended after it either, the copy is ahead of the log,
			// not apart from it: keep it (dropping it would lose a
			// change its local caller saw succeed), and let a snapshot
			// give the fleet what the log lacks (below).
			last, err := l.lastSeq(ctx, k)
			if err != nil {
				return false, err
			}
			ahead = lp.seq >= last
			valid = ahead
		}
	}
	switch {
	case ok && hd.Deleted:
		return exists, nil // reconcile drops the copy
	case valid:
		from = lp.seq
	case ok:
		if err := h.pull(ctx, k, hd, exists, requestID); err != nil {
			return exists, fmt.Errorf("pull: %w", err)
		}
		exists, from = true, hd.LogSeq
	case !exists:
		return false, nil // nothing anywhere yet (a create in flight)
	default:
		// A copy the fleet never had a snapshot of (made before the log,
		// or whose create was never acknowledged): kept as it is.
		if from, err = l.lastSeq(ctx, k); err != nil {
			return exists, err
		}
	}
	last, err := l.lastSeq(ctx, k)
	if err != nil {
		return exists, err
	}
	replayed := 0
	for try := 1; ; try++ {
		if last > from {
			n, err := l.replay(ctx, k, from, last)
			if err != nil {
				return exists, err
			}
			replayed += n
		}
		from = last
		l.mu.Lock()
		l.last[k] = last
		delete(l.lapsed, k)
		l.mu.Unlock()
		e := messages.ChangeEntry{Kind: messages.LogEpoch, Epoch: epoch, Worker: l.s.id, Time: time.Now().UTC().Format(time.RFC3339Nano)}
		b, _ := json.Marshal(e)
		seq, err := l.append(ctx, k, b)
		if err == nil {
			if ahead {
				// Not recorded as the log's state: the next change, or
				// this push (once the copy is current at epoch), is kept
				// by a snapshot.
				h.schedule(k, pushAction{reason: "takeover"})
			} else {
				pos, err := v.ChangeSeq(ctx)
				if err != nil {
					return exists, err
				}
				l.record(ctx, k, pos, seq)
				// The entries replayed count toward the next snapshot:
				// counted from 0 by each new owner, a log could grow
				// past snapshotEvery across failovers.
				l.mu.Lock()
				l.since[k] = replayed
				l.mu.Unlock()
				if replayed >= takeoverSnapshot {
					l.mu.Lock()
					l.since[k] = 0
					l.mu.Unlock()
					h.schedule(k, pushAction{reason: "takeover"})
				}
			}
			l.s.log.Info("change log taken over", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, telemetry.LogKeyEpoch, epoch, "seq", seq, "local", valid, "ahead", ahead)
			return exists, nil
		}
		if !errors.Is(err, errLostVault) || try == 5 {
			return exists, err
		}
		// Someone appended meanwhile (the previous owner, still
		// finishing): read on.
		if last, err = l.lastSeq(ctx, k); err != nil {
			return exists, err
		}
	}
}

// replay applies k's entries after from up to last through the handler,
// and says how many changes it applied. The entries are read through an
// ordered consumer in batches, not one stream get each: a takeover's
// replay is part of the failover time, and a get is a round trip to the
// stream's leader.
func (l *changelog) replay(ctx context.Context, k vkey, from, last uint64) (int, error) {
	if last <= from {
		return 0, nil
	}
	start := time.Now()
	cons, err := l.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{messages.LogSubject(k.ns, k.vault)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: from + 1,
	})
	if err != nil {
		return 0, fmt.Errorf("read the change log of %s/%s: %w", k.ns, k.vault, err)
	}
	// The first fetch asks for one entry; each next one for what the last
	// said was pending (at most 256), so no fetch waits out its timeout
	// for entries that do not exist.
	n, want := 0, 1
	for {
		batch, err := cons.Fetch(want, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return n, fmt.Errorf("read the change log of %s/%s: %w", k.ns, k.vault, err)
		}
		got, done := 0, false
		var pending uint64
		// A batch's entries share SQLite transactions (vault.Batch): one
		// commit per fetch instead of one per entry. Nothing is recorded
		// before it commits; a replay that fails leaves the position
		// where it was, and the next takeover pulls instead.
		wb := &vault.Batch{}
		bctx := vault.WithBatch(ctx, wb)
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				l.st.Commit(wb)
				return n, fmt.Errorf("read the change log of %s/%s: %w", k.ns, k.vault, err)
			}
			pending = md.NumPending
			if done || md.Sequence.Stream > last {
				done = true
				continue // drain the batch
			}
			applied, err := l.replayEntry(bctx, k, md.Sequence.Stream, m.Data())
			if err != nil {
				l.st.Commit(wb)
				return n, err
			}
			if applied {
				n++
			}
			done = md.Sequence.Stream >= last
		}
		if err := l.st.Commit(wb); err != nil {
			return n, fmt.Errorf("replay the change log of %s/%s: %w", k.ns, k.vault, err)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return n, fmt.Errorf("read the change log of %s/%s: %w", k.ns, k.vault, err)
		}
		if done || got == 0 || pending == 0 {
			break
		}
		want = int(min(pending, 256))
	}
	if n > 0 {
		l.s.log.Info("change log replayed", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, "entries", n, "from", from, "to", last,
			"took", time.Since(start))
	}
	return n, nil
}

// replayEntry applies the entry at seq of k's log, and says whether it
// was a change applied through the handler.
func (l *changelog) replayEntry(ctx context.Context, k vkey, seq uint64, data []byte) (bool, error) {
	var e messages.ChangeEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return false, fmt.Errorf("change log entry %d of %s/%s: %w", seq, k.ns, k.vault, err)
	}
	if e.Kind == messages.LogResult && e.Request != nil {
		// A fork's row: its target is a vault of its own, kept by its
		// snapshot; running the fork again would make it again.
		rk := vault.RequestKey{Namespace: k.ns, Vault: k.vault, ID: e.Request.RequestID, Op: string(e.Request.Op), ArgsHash: e.ArgsHash}
		err := l.st.StoreResult(ctx, rk, e.Result)
		if errors.Is(err, vault.ErrConflict) {
			return false, nil // recorded already (an entry replayed twice)
		}
		if err != nil {
			return false, fmt.Errorf("change log entry %d of %s/%s: %w", seq, k.ns, k.vault, err)
		}
		// An exec that changed nothing else: its audit event (keepExec).
		for _, ev := range e.Audit {
			rctx := ctx
			if t, err := time.Parse(time.RFC3339Nano, ev.Time); err == nil {
				rctx = vault.WithTime(ctx, t)
			}
			if err := l.st.Vault(k.ns, k.vault).Record(rctx, ev.Action, ev.Path, ev.Details, vault.Meta{Actor: ev.Actor, RequestID: ev.RequestID, TraceID: ev.TraceID}); err != nil {
				return false, fmt.Errorf("change log entry %d of %s/%s: audit: %w", seq, k.ns, k.vault, err)
			}
		}
		return len(e.Audit) > 0, nil
	}
	if e.Kind != messages.LogOp || e.Request == nil {
		return false, nil // an epoch, or a snapshot whose push never landed
	}
	rctx := ctx
	if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
		rctx = vault.WithTime(ctx, t)
	}
	req := *e.Request
	if rep := l.s.h.Handle(rctx, req); rep.Error != nil {
		// The change was applied once, with success: a replay that fails
		// means the copy differs from the owner's.
		l.s.log.Error("change log: replay failed", telemetry.LogKeyVault, k.vault, "seq", seq, "op", req.Op,
			telemetry.LogKeyRequest, req.RequestID, telemetry.LogKeyErr, rep.Error.Message)
	}
	return true, nil
}

// reconcileLogged is reconcile for a vault whose changes are logged: the
// local copy becomes the log's state (take), then, as without the log,
// the head moves to the new epoch and the store records it.
func (h *handoff) reconcileLogged(ctx context.Context, k vkey, epoch int64, requestID string) error {
	if err := h.open(ctx); err != nil {
		return err
	}
	hd, rev, ok, err := h.head(ctx, k)
	if err != nil {
		return err
	}
	st := h.st
	exists, err := h.s.clog.take(ctx, k, epoch, hd, ok, requestID)
	if err != nil {
		return err
	}
	if ok && hd.Deleted && exists && hd.Store != h.storeID {
		// Deleted elsewhere after this copy was current (see reconcile).
		if err := st.Delete(ctx, k.ns, k.vault, vault.Meta{Actor: "worker:" + h.s.id}); err != nil {
			return fmt.Errorf("drop the copy of a deleted vault: %w", err)
		}
		h.s.h.Changed(messages.OpVaultDelete, k.ns, k.vault)
		exists = false
	}
	if !exists || ok && hd.Deleted {
		return nil
	}
	return h.settle(ctx, k, epoch, hd, rev, ok)
}

// ranInBackground pushes a snapshot of k after a background run changed
// it: the run's effects are held by the fleet once it lands.
func (h *handoff) ranInBackground(k vkey) {
	if h.s.clog.logged(context.Background(), k) {
		h.schedule(k, pushAction{reason: "run"})
	}
}

// loggedAt decides, at a takeover, whether k's changes are in the log:
// the head names the mode it was pushed under (every change of mode
// pushes one), else the local copy's setting counts.
func (l *changelog) loggedAt(ctx context.Context, k vkey) (bool, error) {
	if !l.streamOn() {
		return false, nil
	}
	if err := l.s.ho.open(ctx); err != nil {
		return false, err
	}
	hd, _, ok, err := l.s.ho.head(ctx, k)
	if err != nil {
		return false, err
	}
	if ok && !hd.Deleted && hd.Replication != "" {
		l.setMode(k, hd.Replication)
	} else {
		l.dropMode(k)
	}
	return l.logged(ctx, k), nil
}
