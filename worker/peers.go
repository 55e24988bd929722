package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// Namespace fan-out. With a store per machine, a namespace's vaults and
// approvals are spread over the workers' stores, but the dispatcher
// sends a namespace-scoped request to any one worker. That worker asks
// its live peers on messages.PeerSubject and merges:
//
//   - vault.list, approval.list: its own answer plus every live peer's,
//     asked concurrently with peerTimeout each; a peer that does not
//     answer is skipped (and logged). Vaults are one entry per name, the
//     one reported by the vault's owner when it is among the reporters;
//     approvals are one entry per id.
//   - approval.show, .grant, .deny: answered locally when the local store
//     has the approval. Otherwise the peers are asked approval.show, and
//     the first that shows it is the holder: a show returns its answer, a
//     grant or deny goes to the holder alone. A grant is thus sent to one
//     worker only (two workers sharing a store would both show it), and
//     its pending→running transition there keeps it from running twice.
//
// A peer answers from its own store and never fans out again.

const (
	// peerTimeout bounds each peer's answer to a list or a lookup: a slow
	// peer costs the caller this much at most, never its whole deadline.
	peerTimeout = 2 * time.Second
	// peerRunTimeout bounds a grant or deny forwarded to its holder when
	// the caller set no deadline; a grant runs the held command there.
	peerRunTimeout = 10 * time.Minute
)

// peers serves this worker's peer subject and asks the other workers.
type peers struct {
	s  *Server
	mu sync.Mutex
	// closed stops new peer requests from starting once Run is ending, so
	// wg.Wait sees every one of them.
	closed  bool
	wg      sync.WaitGroup
	members jetstream.KeyValue
}

func newPeers(s *Server) *peers { return &peers{s: s} }

// fansOut reports whether op is a namespace-scoped op answered from every
// worker's store.
func fansOut(op messages.Op) bool {
	switch op {
	case messages.OpVaultList, messages.OpApprovalList, messages.OpApprovalShow, messages.OpApprovalGrant, messages.OpApprovalDeny:
		return true
	}
	return false
}

// endpoint registers the peer subject on svc. It is a micro endpoint, like
// the status one, so `nats micro stats` counts peer requests per worker;
// each request runs in its own goroutine, since a micro handler runs on
// the subscription's goroutine and a grant may run a long command. Peer
// requests do not take a slot of Concurrency: two busy workers asking
// each other would otherwise wait on each other until the timeout.
func (p *peers) endpoint(svc micro.Service) error {
	subj := messages.SubjectPeer + "." + p.s.id + ".>"
	return svc.AddEndpoint("peer", micro.HandlerFunc(func(r micro.Request) {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			p.respond(r, messages.Reply{Error: messages.Errorf(messages.CodeUnavailable, "worker %s is stopping", p.s.id)})
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.serve(r)
		}()
	}), micro.WithEndpointSubject(subj))
}

// close stops taking peer requests and waits for those running.
func (p *peers) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// serve answers one peer request from this worker's store.
func (p *peers) serve(r micro.Request) {
	s := p.s
	hdr := nats.Header(r.Headers())
	ctx, span := s.tr.Start(telemetry.Extract(context.Background(), hdr), "peer",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("avfs.worker", s.id)))
	defer span.End()
	req, perr := messages.DecodeWork(r.Subject(), r.Data())
	span.SetAttributes(attribute.String("avfs.op", string(req.Op)), attribute.String("avfs.namespace", req.Namespace),
		attribute.String("avfs.request_id", req.RequestID))
	if perr == nil && req.Op == messages.OpVaultPush && req.Vault == "" {
		p.respond(r, s.ho.servePush(ctx, req)) // a merge's fork (merge.go)
		return
	}
	if perr == nil && (!fansOut(req.Op) || req.Vault != "") {
		perr = messages.Errorf(messages.CodeInvalidArgument, "%s is not a peer op", req.Op)
	}
	if perr != nil {
		p.respond(r, messages.Reply{RequestID: req.RequestID, Error: perr})
		return
	}
	if dl, err := time.Parse(time.RFC3339Nano, hdr.Get(messages.HeaderDeadline)); err == nil && time.Now().After(dl) {
		p.respond(r, messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeTimeout, "the caller's deadline %s passed before the request ran", dl.Format(time.RFC3339))})
		return
	}
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	rep := s.handle(ctx, req)
	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
	p.respond(r, rep)
}

func (p *peers) respond(r micro.Request, rep messages.Reply) {
	b, err := json.Marshal(rep)
	if err == nil {
		err = r.Respond(b)
	}
	if err != nil {
		p.s.log.Warn("peer reply", "request", rep.RequestID, "err", err)
	}
}

// handle serves a request forwarded to this worker: locally, and for the
// namespace-scoped ops also from the peers' stores. deadline is the
// caller's (zero when it set none).
func (p *peers) handle(ctx context.Context, req messages.Request, local messages.Reply, deadline time.Time) messages.Reply {
	if !fansOut(req.Op) || local.Error != nil && local.Error.Code != messages.CodeApprovalNotFound {
		return local
	}
	switch req.Op {
	case messages.OpVaultList:
		return p.mergeVaults(ctx, req, local)
	case messages.OpApprovalList:
		return p.mergeApprovals(ctx, req, local)
	}
	if local.Error == nil {
		return local // the approval is held here
	}
	return p.forward(ctx, req, local, deadline)
}

// live lists the other workers with a current heartbeat in BucketMembers.
func (p *peers) live(ctx context.Context) ([]string, error) {
	p.mu.Lock()
	kv := p.members
	p.mu.Unlock()
	if kv == nil {
		var err error
		if kv, err = p.s.js.KeyValue(ctx, messages.BucketMembers); err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.members = kv
		p.mu.Unlock()
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range keys.Keys() {
		if id, ok := strings.CutPrefix(k, "worker."); ok && id != p.s.id {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// answer is one peer's reply to a fanned-out request.
type answer struct {
	worker string
	rep    messages.Reply
}

// ask sends req to every live peer at once and returns the replies that
// came within timeout, in peer order; a peer that fails is logged and
// named in missed.
func (p *peers) ask(ctx context.Context, req messages.Request, timeout time.Duration) (got []answer, missed []string) {
	log := p.s.log.With("op", req.Op, "namespace", req.Namespace, "request", req.RequestID)
	ids, err := p.live(ctx)
	if err != nil {
		log.WarnContext(ctx, "peer fan-out: members", "err", err)
		return nil, []string{"(membership unreadable)"}
	}
	out := make([]answer, len(ids))
	ok := make([]bool, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := p.request(ctx, id, req, timeout)
			if err != nil {
				log.WarnContext(ctx, "peer skipped", "peer", id, "err", err)
				return
			}
			out[i], ok[i] = answer{worker: id, rep: rep}, true
		}()
	}
	wg.Wait()
	for i := range out {
		if ok[i] {
			got = append(got, out[i])
		} else {
			missed = append(missed, ids[i])
		}
	}
	return got, missed
}

// request asks worker id about req and waits up to timeout for its reply.
func (p *peers) request(ctx context.Context, id string, req messages.Request, timeout time.Duration) (messages.Reply, error) {
	var rep messages.Reply
	body, err := json.Marshal(req)
	if err != nil {
		return rep, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg := nats.NewMsg(messages.PeerSubject(id, req.Namespace, req.Op))
	msg.Data = body
	msg.Header.Set(messages.HeaderRequestID, req.RequestID)
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(messages.HeaderDeadline, dl.UTC().Format(time.RFC3339Nano))
	}
	telemetry.Inject(ctx, msg.Header)
	m, err := p.s.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// mergeVaults adds the peers' vaults to the local list: one entry per
// vault, the owner's when the owner reported it (workers sharing a store
// report the same vault too), else the first reporter's, local first;
// sorted by name as each store lists. A vault whose owner answered
// without it is left out: the others hold a copy left behind when it
// moved, and the owner's store says it is gone.
func (p *peers) mergeVaults(ctx context.Context, req messages.Request, local messages.Reply) messages.Reply {
	var res messages.VaultListResult
	if err := json.Unmarshal(local.Result, &res); err != nil {
		return errorReply(req, err)
	}
	byName := map[string]int{}
	from := make([]string, 0, len(res.Vaults))
	for i, v := range res.Vaults {
		byName[v.Name] = i
		from = append(from, p.s.id)
	}
	answered := map[string]bool{p.s.id: true}
	got, missed := p.ask(ctx, req, peerTimeout)
	for _, a := range got {
		var pr messages.VaultListResult
		if a.rep.Error != nil || json.Unmarshal(a.rep.Result, &pr) != nil {
			p.s.log.WarnContext(ctx, "peer skipped", "peer", a.worker, "op", req.Op, "err", a.rep.Error)
			missed = append(missed, a.worker)
			continue
		}
		answered[a.worker] = true
		for _, v := range pr.Vaults {
			i, seen := byName[v.Name]
			if !seen {
				byName[v.Name] = len(res.Vaults)
				res.Vaults = append(res.Vaults, v)
				from = append(from, a.worker)
				continue
			}
			if o, ok := p.s.owned.Cached(req.Namespace, v.Name); ok && o.Worker == a.worker && from[i] != o.Worker {
				res.Vaults[i], from[i] = v, a.worker
			}
		}
	}
	kept := res.Vaults[:0]
	for i, v := range res.Vaults {
		if o, ok := p.s.owned.Cached(req.Namespace, v.Name); ok && answered[o.Worker] && from[i] != o.Worker {
			continue
		}
		kept = append(kept, v)
	}
	res.Vaults, res.Unanswered = kept, missed
	sort.SliceStable(res.Vaults, func(i, j int) bool { return res.Vaults[i].Name < res.Vaults[j].Name })
	return resultReply(req, res)
}

// mergeApprovals adds the peers' approvals to the local list, one entry
// per id, newest first as each store lists.
func (p *peers) mergeApprovals(ctx context.Context, req messages.Request, local messages.Reply) messages.Reply {
	var res messages.ApprovalListResult
	if err := json.Unmarshal(local.Result, &res); err != nil {
		return errorReply(req, err)
	}
	seen := map[string]bool{}
	for _, a := range res.Approvals {
		seen[a.ID] = true
	}
	got, missed := p.ask(ctx, req, peerTimeout)
	for _, a := range got {
		var pr messages.ApprovalListResult
		if a.rep.Error != nil || json.Unmarshal(a.rep.Result, &pr) != nil {
			p.s.log.WarnContext(ctx, "peer skipped", "peer", a.worker, "op", req.Op, "err", a.rep.Error)
			missed = append(missed, a.worker)
			continue
		}
		for _, ap := range pr.Approvals {
			if !seen[ap.ID] {
				seen[ap.ID] = true
				res.Approvals = append(res.Approvals, ap)
			}
		}
	}
	res.Unanswered = missed
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339Nano, s); return t }
	sort.SliceStable(res.Approvals, func(i, j int) bool {
		return at(res.Approvals[i].RequestedAt).After(at(res.Approvals[j].RequestedAt))
	})
	return resultReply(req, res)
}

// forward finds the peer holding the approval that the local store lacks
// and has it answer req; local (APPROVAL_NOT_FOUND) stands when no peer
// holds it. Only the holder receives a grant or deny.
func (p *peers) forward(ctx context.Context, req messages.Request, local messages.Reply, deadline time.Time) messages.Reply {
	show := req
	show.Op = messages.OpApprovalShow
	// The holder is the peer that shows it; failing that, a peer's other
	// error (a stopping worker, a broken store) says more than NOT_FOUND.
	var holder *answer
	got, _ := p.ask(ctx, show, peerTimeout)
	for _, a := range got {
		if a.rep.Error == nil {
			holder = &a
			break
		}
		if holder == nil && a.rep.Error.Code != messages.CodeApprovalNotFound {
			holder = &a
		}
	}
	switch {
	case holder == nil:
		return local
	case req.Op == messages.OpApprovalShow || holder.rep.Error != nil:
		holder.rep.RequestID = req.RequestID
		return holder.rep
	}
	timeout := peerRunTimeout
	if !deadline.IsZero() {
		timeout = time.Until(deadline)
	}
	rep, err := p.request(ctx, holder.worker, req, timeout)
	if err != nil {
		// The holder may still be running it: a retry of the grant
		// answers CONFLICT once it started, so it never runs twice.
		code := messages.CodeUnavailable
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			code = messages.CodeTimeout
		}
		return messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(code, "%s on worker %s: %v", req.Op, holder.worker, err)}
	}
	return rep
}

func resultReply(req messages.Request, res any) messages.Reply {
	b, err := json.Marshal(res)
	if err != nil {
		return errorReply(req, err)
	}
	return messages.Reply{RequestID: req.RequestID, Result: b}
}

func errorReply(req messages.Request, err error) messages.Reply {
	return messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeInternal, "merge %s: %v", req.Op, err)}
}

// holds asks worker w whether its store has vault ns/name; answered is
// false when w did not answer in time.
func (p *peers) holds(ctx context.Context, w, ns, name string) (has, answered bool) {
	req := messages.Request{Op: messages.OpVaultList, Namespace: ns, RequestID: "holds-" + nuid.Next()}
	rep, err := p.request(ctx, w, req, peerTimeout)
	if err != nil || rep.Error != nil {
		return false, false
	}
	var res messages.VaultListResult
	if json.Unmarshal(rep.Result, &res) != nil {
		return false, false
	}
	for _, v := range res.Vaults {
		if v.Name == name {
			return true, true
		}
	}
	return false, true
}
