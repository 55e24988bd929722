package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/owners"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// scopeName is the instrumentation scope of the fleet's metrics and spans.
const scopeName = "github.com/avfs/avfs/worker"

// ServeOptions configure a fleet worker.
type ServeOptions struct {
	ID          string
	Concurrency int           // requests served at once across vaults; default 8
	AckWait     time.Duration // redelivery after this long without progress; default 30 s
	// MaxDeliver is how many times a request is delivered before
	// JetStream gives up on it and the dispatcher dead-letters it;
	// default 5.
	MaxDeliver int
	// Wrap, when set, wraps the worker's core (core.go) in layers of
	// the caller's: tests install faults with it (NoProgress, or a
	// worker dying once a change is held and before its reply). Leave it
	// nil in production.
	Wrap func(handler.Core) handler.Core
	// WrapChange, when set, wraps the handler inside the change log's
	// layer (core.go): what it does after the handler returns happens
	// after a change was made and before it is appended (tests pause an
	// owner there). Leave it nil in production.
	WrapChange func(handler.Core) handler.Core
	Logger     *slog.Logger
	// Tracer records a process span per delivery attempt, child of the
	// dispatcher's route span; nil means no tracing.
	Tracer trace.TracerProvider
	// AuditPoll is how often the worker looks for new audit events to
	// publish to the audit stream when no local commit woke it (writes
	// by other processes on the same store); default 200 ms.
	AuditPoll time.Duration
	// SweepEvery is how often the worker deletes the expired vaults it
	// owns (expire.go); default 5 s.
	SweepEvery time.Duration
	// Heartbeat is how often the worker puts its heartbeat in the
	// members bucket (config fleet.heartbeat); default
	// messages.HeartbeatInterval. It must be well under the bucket's TTL.
	Heartbeat time.Duration
	// GCInterval, when set, runs the fleet's chunk garbage collection
	// in the background about this often (config fleet.gc_interval;
	// periodicgc.go); 0 never does.
	GCInterval time.Duration
	// GCSettle is the periodic sweep's settle time (ChunkGCOptions);
	// default DefaultChunkGCSettle. Tests shorten it.
	GCSettle time.Duration
	// CatchUpEvery is how often the worker pushes snapshots of copies
	// ahead of their log (writes through its mounts; ahead.go); default
	// one second. Negative never does: tests check that an fsync holds
	// its writes by itself. Leave it zero in production.
	CatchUpEvery time.Duration
}

// Server serves the requests a dispatcher forwards to one worker id.
// Requests to one vault run in order, one at a time; different vaults run
// concurrently up to Concurrency, and JetStream holds the rest (MaxAckPending
// is the back-pressure, not an unbounded queue here).
type Server struct {
	id  string
	h   *handler.Handler
	nc  *nats.Conn
	js  jetstream.JetStream
	o   ServeOptions
	log *slog.Logger
	tr  trace.Tracer
	// attempts is BucketAttempts, nil when the fleet has none (set up
	// by an older version): then attempts are not linked.
	attempts jetstream.KeyValue
	sem      chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	qs       map[string]chan delivery // per-vault queues, each drained by one goroutine
	seen     map[string]struct{}
	busy     int
	execs    int           // the execs among busy: a member's running_execs
	stop     chan struct{} // closed when Run ends: idle queues retire at once
	ho       *handoff      // pushes and pulls vault copies (handoff.go)
	cat      *catalog      // the fleet's vault and approval catalogs (catalog.go)
	pr       *peers        // vault.push between workers, for merges (peers.go)
	serve    handler.Core  // the handler wrapped in the fleet's layers (core.go)
	clog     *changelog    // the fleet's change log: replication at acknowledgement (changelog.go)
	// owned mirrors BucketOwners (set by Run): a worker serves a vault
	// only while it is the vault's owner.
	owned *owners.Cache
	// directOff is set (under mu) when direct requests stop joining the
	// queues, before Run drains them.
	directOff bool
	// store is the handler's store, for the fleet's own reads and
	// writes (catalog seeds, the audit stream, sweeps); the handoff
	// reaches it through replicaStore only.
	store *vault.Store
	meter metric.MeterProvider // never nil
}

// NewServer returns a worker server on nc for node n, whose handler it
// wraps (core.go) and whose store it replicates. It does not own n: the
// caller closes n after Run returned (Open composes both).
func NewServer(nc *nats.Conn, n *node.Node, o ServeOptions) (*Server, error) {
	if o.ID == "" {
		o.ID = n.ID()
	}
	if o.ID == "" {
		return nil, fmt.Errorf("worker id: %w", errEmpty)
	}
	if o.Tracer == nil {
		o.Tracer = n.Tracer()
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.AckWait == 0 {
		o.AckWait = 30 * time.Second
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = 5
	}
	if o.Logger == nil {
		o.Logger = n.Logger()
	}
	if o.AuditPoll <= 0 {
		o.AuditPoll = 200 * time.Millisecond
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = defaultSweepEvery
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = messages.HeartbeatInterval
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := (&Server{id: o.ID, h: n.Handler(), store: n.Store(), meter: telemetry.MeterProvider(n.Meter()), nc: nc, js: js, o: o, log: o.Logger.With(telemetry.LogKeyWorker, o.ID),
		tr: telemetry.Provider(o.Tracer).Tracer(scopeName), sem: make(chan struct{}, o.Concurrency), qs: map[string]chan delivery{}, seen: map[string]struct{}{},
		stop: make(chan struct{})}).withHandoff()
	// An fsync through the worker's mounts returns once the fleet
	// holds it (mountsync.go).
	n.SetMountSync(s.clog.mountSynced)
	return s, nil
}

func (s *Server) withHandoff() *Server {
	s.ho = newHandoff(s)
	s.clog = newChangelog(s)
	s.cat = newCatalog(s)
	s.pr = newPeers(s)
	// Expired vaults are deleted through the fleet (sweepExpired), never
	// behind its back by maint.run.
	s.h.SweepOwned(nil)
	handler.Register(s.h, messages.OpVaultMerge, s.mergeOp) // a fork may be on another worker (merge.go)
	s.useObjects()
	s.serve = s.core(s.h)
	// A background run changes its vault after its request was answered;
	// it reports the change when it ends.
	s.h.OnChange(func(op messages.Op, ns, vault string) {
		if op == messages.OpExec {
			s.ho.markDirty(vkey{ns, vault})
			s.ho.ranInBackground(vkey{ns, vault})
		}
		s.cat.touch(vkey{ns, vault})
	})
	return s
}

var errEmpty = fmt.Errorf("must not be empty")

// Run serves until ctx ends, then stops taking work, finishes what it
// started and returns.
func (s *Server) Run(ctx context.Context) error {
	if kv, err := s.js.KeyValue(ctx, messages.BucketAttempts); err == nil {
		s.attempts = kv
	} else {
		s.log.Warn("attempt links disabled", "bucket", messages.BucketAttempts, telemetry.LogKeyErr, err)
	}
	if err := s.clog.open(ctx); err != nil {
		return err
	}
	okv, err := s.js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		return fmt.Errorf("owners bucket: %w", err)
	}
	if s.owned, err = owners.Watch(ctx, okv); err != nil {
		return fmt.Errorf("watch owners: %w", err)
	}
	if err := s.cat.open(ctx); err != nil {
		s.log.Warn("vault catalog disabled: the dispatcher's lists will miss this worker's vaults", telemetry.LogKeyErr, err)
	}
	// The catalog outlives the requests, like the audit publisher: its
	// last flush comes after the last one finished.
	cctx, ccancel := context.WithCancel(context.WithoutCancel(ctx))
	var cwg sync.WaitGroup
	cwg.Add(4)
	go func() { defer cwg.Done(); s.clog.flushLoop(cctx) }()
	go func() { defer cwg.Done(); s.clog.catchUpLoop(cctx, s.o.CatchUpEvery) }()
	go func() { defer cwg.Done(); s.cat.run(cctx) }()
	go func() { defer cwg.Done(); s.cat.seed(cctx) }()
	defer func() { ccancel(); cwg.Wait() }()
	lost := make(chan struct{}, 1)
	cc, err := s.consumeAtStart(ctx, lost)
	if err != nil {
		return err
	}
	// A micro service makes workers discoverable with $SRV requests (the
	// nats CLI's `nats micro ls`), with request stats per endpoint.
	svc, err := micro.AddService(s.nc, micro.Config{
		Name: "avfs-worker", Version: "1.0.0", Description: "avfs vault worker",
		Metadata: map[string]string{"worker": s.id, "protocol": messages.SubjectRoot},
	})
	if err != nil {
		cc.Stop()
		return fmt.Errorf("micro service: %w", err)
	}
	defer svc.Stop()
	if err := svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) {
		r.RespondJSON(s.member())
	}), micro.WithEndpointSubject(messages.SubjectRoot+".worker."+s.id+".status")); err != nil {
		cc.Stop()
		return fmt.Errorf("micro endpoint: %w", err)
	}
	if err := s.pr.endpoint(svc); err != nil {
		cc.Stop()
		return fmt.Errorf("peer endpoint: %w", err)
	}
	if unobserve, err := s.observeQueue(); err != nil {
		s.log.Warn("queue metrics", telemetry.LogKeyErr, err)
	} else {
		defer unobserve()
	}
	// The audit publisher outlives the requests: it stops after the
	// last one finished, so their events go out before Run returns.
	actx, acancel := context.WithCancel(context.WithoutCancel(ctx))
	adone := make(chan struct{})
	go func() { defer close(adone); s.publishAudit(actx) }()
	defer func() { acancel(); <-adone }()
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan struct{})
	go func() { defer close(sdone); s.sweepExpired(sctx) }()
	defer func() { scancel(); <-sdone }()
	gctx, gcancel := context.WithCancel(ctx)
	gdone := make(chan struct{})
	go func() { defer close(gdone); s.collectPeriodically(gctx) }()
	defer func() { gcancel(); <-gdone }()
	hb := time.NewTicker(s.o.Heartbeat)
	defer hb.Stop()
	s.heartbeat(ctx)
	stopDirect, err := s.serveDirect() // direct.go
	if err != nil {
		cc.Stop()
		return fmt.Errorf("direct requests: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			// Keep heartbeating until the pushes are done: a worker whose
			// heartbeat lapsed while it finished a long exec would have
			// its vaults taken before it pushed them.
			hctx := context.WithoutCancel(ctx)
			beating, beat := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(beat)
				for {
					select {
					case <-beating:
						return
					case <-hb.C:
						s.heartbeat(hctx)
					}
				}
			}()
			stopDirect()
			// Drain returns at once; the messages already delivered still
			// reach enqueue until Closed.
			cc.Drain()
			select {
			case <-cc.Closed():
			case <-time.After(10 * time.Second):
				s.log.Warn("work consumer did not close in 10 s")
			}
			close(s.stop)
			s.wg.Wait()
			s.h.Stop() // end the background runs, so drain pushes their changes
			s.pr.close()
			s.ho.drain() // push what changed since each vault's last push
			close(beating)
			<-beat // no heartbeat may land after the release
			s.release()
			return nil
		case <-hb.C:
			s.heartbeat(ctx)
			if _, err := s.js.Consumer(ctx, messages.StreamWork, messages.WorkConsumer(s.id)); errors.Is(err, jetstream.ErrConsumerNotFound) {
				signal(lost)
			}
		case <-lost:
			// A dispatcher took this worker for dead (its heartbeat
			// lapsed: a pause, a partition) and deleted its consumer to
			// move its work elsewhere. Being back, it takes new work.
			cc.Stop()
			if next, err := s.consume(ctx, lost); err != nil {
				// (The next heartbeat finds it missing and tries again.)
				s.log.Warn("work consumer not restored", telemetry.LogKeyErr, err)
			} else {
				s.log.Info("work consumer restored after it was deleted")
				cc = next
			}
		}
	}
}

// errCodeWQConsumerNotUnique is JetStream's error for a consumer whose
// filter overlaps another's on a work-queue stream.
const errCodeWQConsumerNotUnique jetstream.ErrorCode = 10100

// consume creates this worker's consumer of the work stream and starts
// taking its messages; lost is signalled when the consumer is deleted.
func (s *Server) consume(ctx context.Context, lost chan struct{}) (jetstream.ConsumeContext, error) {
	name := messages.WorkConsumer(s.id)
	cons, err := s.js.CreateOrUpdateConsumer(ctx, messages.StreamWork, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: messages.WorkFilter(s.id),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: s.o.AckWait, MaxDeliver: s.o.MaxDeliver,
		MaxAckPending: s.o.Concurrency * 16,
	})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWQConsumerNotUnique {
		// While a NATS node of a cluster stops, the consumer can be
		// reported missing (the worker took it for deleted) though it
		// exists, and creating it again conflicts with itself: take it
		// as it is. (A dispatcher's rescue consumer holding the filter is
		// not found by this name: the next heartbeat tries again.)
		if c, gerr := s.js.Consumer(ctx, messages.StreamWork, name); gerr == nil {
			cons, err = c, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker consumer: %w", err)
	}
	cc, err := cons.Consume(s.enqueue, jetstream.PullExpiry(messages.PullExpiry),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				signal(lost)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("worker consume: %w", err)
	}
	return cc, nil
}

// consumeWait bounds how long a starting worker waits for its work
// subject to be free.
const consumeWait = 30 * time.Second

// consumeAtStart is consume for a starting worker. A worker started again
// with its old id right after it died finds a dispatcher's rescue consumer
// still holding its work subject (moving the dead worker's requests on):
// it waits for the rescue to end rather than exit.
func (s *Server) consumeAtStart(ctx context.Context, lost chan struct{}) (jetstream.ConsumeContext, error) {
	deadline := time.Now().Add(consumeWait)
	for {
		cc, err := s.consume(ctx, lost)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeWQConsumerNotUnique || time.Now().After(deadline) {
			return cc, err
		}
		s.log.Warn("work subject held by another consumer (a rescue of this worker's requests?): trying again", telemetry.LogKeyErr, err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// signal wakes c's reader without blocking (c has room for one).
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *Server) heartbeat(ctx context.Context) {
	kv, err := s.js.KeyValue(ctx, messages.BucketMembers)
	if err != nil {
		s.log.Warn("heartbeat", telemetry.LogKeyErr, err)
		return
	}
	b, _ := json.Marshal(s.member())
	if _, err := kv.Put(ctx, messages.WorkerPrefix+s.id, b); err != nil {
		s.log.Warn("heartbeat", telemetry.LogKeyErr, err)
	}
}

// release ends this worker's membership at once, rather than when its
// heartbeat expires: dispatchers then hand its vaults to live workers at
// their next request, and those take them from the copies drain pushed.
func (s *Server) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, messages.BucketMembers)
	if err == nil {
		err = kv.Delete(ctx, messages.WorkerPrefix+s.id)
	}
	if err != nil {
		s.log.Warn("release membership", telemetry.LogKeyErr, err)
	}
}

func (s *Server) member() messages.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return messages.Member{ID: s.id, Kind: "worker", Vaults: len(s.seen), RunningExecs: s.execs,
		Load: float64(s.busy) / float64(s.o.Concurrency), LastSeen: time.Now().UTC().Format(time.RFC3339Nano)}
}

// observeQueue reports, as avfs.queue.depth, the requests delivered to
// this worker and waiting in its per-vault queues (JetStream holds the
// rest, up to MaxAckPending in flight).
func (s *Server) observeQueue() (func() error, error) {
	m := s.meter.Meter(scopeName)
	g, err := m.Int64ObservableGauge("avfs.queue.depth", metric.WithUnit("{request}"),
		metric.WithDescription("Requests waiting in the worker's per-vault queues."))
	if err != nil {
		return nil, err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, int64(s.queued()))
		return nil
	}, g)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

func (s *Server) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.qs {
		n += len(q)
	}
	return n
}

// enqueue puts msg on its vault's queue. Consume calls it in delivery
// order, so per-vault order is the stream's order.
func (s *Server) enqueue(msg jetstream.Msg) { s.put(streamMsg{msg}, 0) }

// put adds d to its vault's queue, starting the queue's goroutine if it
// is idle. With limit > 0 (direct requests) it refuses, returning the
// reason, when the queue already holds limit requests or direct requests
// were stopped; with 0 it always queues.
func (s *Server) put(d delivery, limit int) (refused string) {
	key := vaultKey(d.Subject())
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.qs[key]
	switch {
	case limit > 0 && s.directOff:
		return intakeStopping
	case limit > 0 && ok && len(q) >= limit:
		return intakeBusy
	}
	if !ok {
		// Room for every message JetStream may have in flight
		// (MaxAckPending) and the direct requests a queue accepts, so
		// that the send below, under the lock, never blocks.
		q = make(chan delivery, s.o.Concurrency*16+directQueueMax)
		s.qs[key] = q
		s.wg.Add(1)
		go s.drain(key, q)
	}
	s.seen[key] = struct{}{}
	// Sent under the lock so drain cannot retire the queue in between;
	// the queue's size keeps it from blocking.
	q <- d
	return ""
}

func vaultKey(subj string) string {
	// avfs.v1.work.<worker>.<ns>.<vault>.<op>, or avfs.v1.direct.…
	parts := strings.SplitN(subj, ".", 7)
	if len(parts) < 6 {
		return subj
	}
	return parts[4] + "." + parts[5]
}

// drain serves one vault's queue until it is empty for a while.
func (s *Server) drain(key string, q chan delivery) {
	defer s.wg.Done()
	idle := time.NewTimer(30 * time.Second)
	defer idle.Stop()
	for {
		select {
		case msg := <-q:
			s.sem <- struct{}{}
			s.process(msg)
			<-s.sem
			idle.Reset(30 * time.Second)
		case <-s.stop:
			if s.retire(key, q) {
				return
			}
		case <-idle.C:
			if s.retire(key, q) {
				return
			}
		}
	}
}

// retire removes an empty queue so its goroutine can end; enqueue holds
// the same lock, so no message can slip into a retired queue.
func (s *Server) retire(key string, q chan delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(q) > 0 {
		return false
	}
	delete(s.qs, key)
	return true
}

func (s *Server) process(msg delivery) {
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy--
		s.mu.Unlock()
	}()
	attempt := 1
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	_, direct := msg.(directMsg)
	// One process span per delivery: a redelivered request shows as a
	// second process span under the same route span, with its attempt.
	ctx, span := s.tr.Start(telemetry.Extract(context.Background(), msg.Headers()), "process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.Int("avfs.attempt", attempt), attribute.String("avfs.worker", s.id), attribute.Bool("avfs.direct", direct)))
	defer span.End()
	s.linkAttempt(ctx, span, msg, attempt)
	replyTo := msg.replyTo()
	req, perr := messages.DecodeWork(msg.Subject(), msg.Data())
	span.SetAttributes(attribute.String("avfs.op", string(req.Op)), attribute.String("avfs.namespace", req.Namespace),
		attribute.String("avfs.vault", req.Vault), attribute.String("avfs.request_id", req.RequestID))
	if perr != nil {
		// It can never succeed: answered now, never redelivered.
		span.SetStatus(codes.Error, string(perr.Code))
		s.reply(replyTo, messages.Request{}, messages.Reply{RequestID: req.RequestID, Error: perr})
		msg.Term()
		return
	}
	// Nobody waits for a request past its caller's deadline: answer it
	// without running it (the caller retries with the same id if it wants).
	dl, err := time.Parse(time.RFC3339Nano, msg.Headers().Get(messages.HeaderDeadline))
	if err == nil && time.Now().After(dl) {
		s.reply(replyTo, req, messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeTimeout, "the caller's deadline %s passed before the request ran", dl.Format(time.RFC3339))})
		msg.Ack()
		return
	}
	owner, fenced := s.fence(ctx, msg, req, replyTo)
	if fenced {
		return
	}
	if req.Op == messages.OpExec {
		s.mu.Lock()
		s.execs++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.execs--
			s.mu.Unlock()
		}()
	}
	hctx := withTouch(withOwner(handler.WithAttempt(ctx, attempt), owner), msg.InProgress)
	if to := msg.Headers().Get(messages.HeaderOutputTo); req.Op == messages.OpExec && messages.ValidReplyTo(to) {
		hctx = runner.WithOutput(hctx, publishOutput(s.nc, to, req, attempt))
	}
	// In async replication the change is appended once the reply is
	// sent (afterReply), before the vault's next request.
	hctx, after := withAfterReply(hctx)
	rep := s.h.Reply(hctx, req, s.serve) // core.go: decoded once, encoded once
	if rep.Error != nil {
		span.SetStatus(codes.Error, string(rep.Error.Code))
	}
	s.reply(replyTo, req, rep)
	after.run()
	if err := msg.Ack(); err != nil {
		s.log.WarnContext(ctx, "ack", telemetry.LogKeyRequest, req.RequestID, telemetry.LogKeyErr, err)
	}
}

// movedWhileRunning turns the success of a change into UNAVAILABLE when
// the vault's ownership moved while it ran (this worker was taken for
// dead: paused, cut off): the change stays in this store only, which the
// new owner never reads, so reporting it done would be a lie. The caller
// retries with the same request id and the new owner does it.
func (s *Server) movedWhileRunning(req messages.Request, err error, owner messages.Owner) *messages.Error {
	if err != nil || req.Vault == "" || owner.Worker != s.id || !req.Op.Mutating() {
		return nil
	}
	if o, ok := s.owned.Cached(req.Namespace, req.Vault); ok && o.Epoch != owner.Epoch {
		return messages.Errorf(messages.CodeUnavailable,
			"vault %q moved to worker %s while this request ran on %s; its effects were not kept: retry", req.Vault, o.Worker, s.id)
	}
	return nil
}

// linkAttempt links a redelivered or rescued request's process span to
// the previous attempt's, found in BucketAttempts under the request id,
// then records this attempt's span context there for the next one. The
// message's headers cannot change between deliveries (JetStream messages
// are immutable), so every attempt is a child of the same route span and
// the chain of attempts is carried by links. Without tracing, nothing is
// read or written.
func (s *Server) linkAttempt(ctx context.Context, span trace.Span, msg delivery, attempt int) {
	rid := msg.Headers().Get(messages.HeaderRequestID)
	if s.attempts == nil || rid == "" || !span.IsRecording() {
		return
	}
	key := attemptKey(vaultKey(msg.Subject()) + "." + rid) // scoped like the request log
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	// A rescued request starts over at delivery 1 on its new worker; the
	// dispatcher marks its message id (reroute).
	rescued := strings.Contains(msg.Headers().Get(nats.MsgIdHdr), ".from-")
	if attempt > 1 || rescued {
		if e, err := s.attempts.Get(kctx, key); err == nil {
			if prev := telemetry.Parse(string(e.Value())); prev.IsValid() {
				span.AddLink(trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{attribute.String("avfs.link", "previous_attempt")}})
			}
		}
	}
	if sc := telemetry.Serialize(ctx); sc != "" {
		if _, err := s.attempts.PutString(kctx, key, sc); err != nil {
			s.log.DebugContext(ctx, "record attempt", telemetry.LogKeyRequest, rid, telemetry.LogKeyErr, err)
		}
	}
}

// attemptKey is the BucketAttempts key of request id rid: rid itself when
// it is a valid KV key, its SHA-256 otherwise.
func attemptKey(rid string) string {
	ok := rid[0] != '.' && rid[len(rid)-1] != '.' && !strings.Contains(rid, "..")
	for _, r := range rid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=' || r == '/' || r == '.') {
			ok = false
			break
		}
	}
	if ok {
		return rid
	}
	sum := sha256.Sum256([]byte(rid))
	return hex.EncodeToString(sum[:])
}
