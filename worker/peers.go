package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// Peer requests. One worker asks another, named, worker one thing on
// messages.PeerSubject: vault.push, the handoff step of a merge whose
// fork another worker owns (merge.go). Nothing is fanned out and nothing
// is routed here: the asker knows the fork's owner from avfs_owners, as
// it does for a warm-up (handoff.go); namespace-scoped requests are the
// dispatcher's (docs/decisions.md, "One owner for routing").

// peers serves this worker's peer subject and asks the other workers.
type peers struct {
	s  *Server
	mu sync.Mutex
	// closed stops new peer requests from starting once Run is ending, so
	// wg.Wait sees every one of them.
	closed bool
	wg     sync.WaitGroup
}

func newPeers(s *Server) *peers { return &peers{s: s} }

// endpoint registers the peer subject on svc. It is a micro endpoint, like
// the status one, so `nats micro stats` counts peer requests per worker;
// each request runs in its own goroutine, since a micro handler runs on
// the subscription's goroutine and a push may take a while. Peer requests
// do not take a slot of Concurrency: two busy workers asking each other
// would otherwise wait on each other until the timeout.
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

// serve answers one peer request.
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
	if perr == nil && (req.Op != messages.OpVaultPush || req.Vault != "") {
		perr = messages.Errorf(messages.CodeInvalidArgument, "%s is not a peer op", req.Op)
	}
	if perr != nil {
		p.respond(r, messages.Reply{RequestID: req.RequestID, Error: perr})
		return
	}
	if dl, err := time.Parse(time.RFC3339Nano, hdr.Get(messages.HeaderDeadline)); err == nil {
		if time.Now().After(dl) {
			p.respond(r, messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeTimeout, "the caller's deadline %s passed before the request ran", dl.Format(time.RFC3339))})
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	p.respond(r, s.ho.servePush(ctx, req)) // a merge's fork (merge.go)
}

func (p *peers) respond(r micro.Request, rep messages.Reply) {
	b, err := json.Marshal(rep)
	if err == nil {
		err = r.Respond(b)
	}
	if err != nil {
		p.s.log.Warn("peer reply", telemetry.LogKeyRequest, rep.RequestID, telemetry.LogKeyErr, err)
	}
}

// request asks worker id req and waits up to timeout for its reply.
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
