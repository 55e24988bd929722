package worker

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
)

// A worker serves each delivery through the handler's core wrapped in
// what only a fleet knows, outermost first (restic's backend wrappers
// are the model: each holds the next Core and adds one concern):
//
//	handler.Wrap          metrics, the reply size limit
//	ServeOptions.Wrap     faults that tests install (NoProgress); nil in production
//	progress              InProgress heartbeats while the request runs
//	catalogCore           the vault and approval catalogs (catalog.go)
//	movedCore             a change made after the vault moved is refused (UNAVAILABLE)
//	handoffCore           before: bring the copy up to date; after: push, hand a fork over
//	changelogCore         a change is answered only once the fleet's change log holds it (changelog.go)
//	ServeOptions.WrapChange  faults that tests install between a change and its append; nil in production
//	grantCore             approval.grant: the held command's vault is still ours and current
//	*handler.Handler      the core (with merge.go's vault.merge registered on it)
//
// Fencing (fence.go) is decided on the delivery before the core is
// called: a request this worker does not own goes back to the intake
// as a message, never through the core.

// ownerKey carries, in a served call's context, the vault's owner as the
// fence found it (Epoch 0 when the fleet records none).
type ownerKey struct{}

func withOwner(ctx context.Context, o messages.Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, o)
}

func ownerOf(ctx context.Context) messages.Owner {
	o, _ := ctx.Value(ownerKey{}).(messages.Owner)
	return o
}

// touchKey carries the delivery's InProgress: progress calls it while
// the request runs.
type touchKey struct{}

func withTouch(ctx context.Context, touch func() error) context.Context {
	return context.WithValue(ctx, touchKey{}, touch)
}

// core builds the worker's chain around h (see above).
func (s *Server) core(h *handler.Handler) handler.Core {
	var c handler.Core = grantCore{s, h}
	if s.o.WrapChange != nil {
		c = s.o.WrapChange(c)
	}
	c = changelogCore{s.clog, c}
	c = handoffCore{s.ho, c}
	c = movedCore{s, c}
	c = catalogCore{s.cat, c}
	c = progress{every: s.o.AckWait / 3, next: c}
	if s.o.Wrap != nil {
		c = s.o.Wrap(c)
	}
	return h.Wrap(c)
}

// progress tells JetStream the request is alive while it runs (the
// reconcile before it, the pushes after it included), so a long exec is
// not redelivered to another attempt.
type progress struct {
	every time.Duration
	next  handler.Core
}

func (p progress) Serve(ctx context.Context, c handler.Call) (any, error) {
	touch, _ := ctx.Value(touchKey{}).(func() error)
	if touch == nil || p.every <= 0 {
		return p.next.Serve(ctx, c)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				touch()
			}
		}
	}()
	return p.next.Serve(ctx, c)
}

// NoProgress is a test fault, for ServeOptions.Wrap: the worker sends no
// InProgress heartbeats while a request runs, so a request longer than
// AckWait is redelivered (and, after MaxDeliver, dead-lettered). Never
// install it in production.
func NoProgress(next handler.Core) handler.Core {
	return handler.CoreFunc(func(ctx context.Context, c handler.Call) (any, error) {
		return next.Serve(withTouch(ctx, nil), c)
	})
}

// ExitAfterKeep is a test fault, for ServeOptions.Wrap: the process
// kills itself (SIGKILL) once a change of op is held by the fleet and
// before its reply is sent, as a worker dying at that moment would.
// Never install it in production.
func ExitAfterKeep(op messages.Op) func(handler.Core) handler.Core {
	return func(next handler.Core) handler.Core {
		return handler.CoreFunc(func(ctx context.Context, c handler.Call) (any, error) {
			res, err := next.Serve(ctx, c)
			if err == nil && c.Request.Op == op {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return res, err
		})
	}
}

// handoffCore brings the local copy up to date before a call, and after
// it schedules the pushes it calls for (handoff.go).
type handoffCore struct {
	ho   *handoff
	next handler.Core
}

func (w handoffCore) Serve(ctx context.Context, c handler.Call) (any, error) {
	owner := ownerOf(ctx)
	p, e := w.ho.before(ctx, c, owner)
	if e != nil {
		return nil, e
	}
	res, err := w.next.Serve(ctx, c)
	return w.ho.after(ctx, c, res, err, owner, p)
}

// movedCore turns the success of a change into UNAVAILABLE when the
// vault's ownership moved while it ran (movedWhileRunning).
type movedCore struct {
	s    *Server
	next handler.Core
}

func (w movedCore) Serve(ctx context.Context, c handler.Call) (any, error) {
	res, err := w.next.Serve(ctx, c)
	if e := w.s.movedWhileRunning(c.Request, err, ownerOf(ctx)); e != nil {
		return nil, e
	}
	return res, err
}

// catalogCore writes what the dispatcher lists (catalog.go).
type catalogCore struct {
	cat  *catalog
	next handler.Core
}

func (w catalogCore) Serve(ctx context.Context, c handler.Call) (any, error) {
	res, err := w.next.Serve(ctx, c)
	return w.cat.record(ctx, c, res, err, ownerOf(ctx))
}

// changelogCore answers a change only once the fleet holds it: appended
// to the vault's change log, or kept by a snapshot (changelog.go).
type changelogCore struct {
	l    *changelog
	next handler.Core
}

func (w changelogCore) Serve(ctx context.Context, c handler.Call) (any, error) {
	return w.l.serve(ctx, c, ownerOf(ctx), true, func(ctx context.Context) (any, error) { return w.next.Serve(ctx, c) })
}

// afterReplyKey carries a delivery's afterReply: work the layers leave
// for once the reply is sent (an async replication's append).
type afterReplyKey struct{}

// afterReply is the work left for once a delivery's reply is sent.
type afterReply struct {
	mu  sync.Mutex
	fns []func()
}

func withAfterReply(ctx context.Context) (context.Context, *afterReply) {
	a := &afterReply{}
	return context.WithValue(ctx, afterReplyKey{}, a), a
}

// deferAfterReply leaves fn for once the reply is sent; it reports false
// (and leaves nothing) when the caller of ctx sends no reply of its own
// (a call served outside a delivery): then the caller must run fn.
func deferAfterReply(ctx context.Context, fn func()) bool {
	a, _ := ctx.Value(afterReplyKey{}).(*afterReply)
	if a == nil {
		return false
	}
	a.mu.Lock()
	a.fns = append(a.fns, fn)
	a.mu.Unlock()
	return true
}

// run runs the work left, in order; it must be called (a left append
// holds its vault's log lock until it ran).
func (a *afterReply) run() {
	a.mu.Lock()
	fns := a.fns
	a.fns = nil
	a.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
