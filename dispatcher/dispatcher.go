// Package dispatcher owns placement and routing in an avfs fleet, and is
// the only place that decides where a request goes: it takes requests
// from the durable intake stream, finds the worker that owns each vault
// (BucketOwners, compare-and-set with an epoch), places new vaults on the
// least loaded live worker (BucketMembers heartbeats), reassigns the
// vaults of a worker whose heartbeat expired, and forwards each request to
// its worker's subject. Namespace-scoped ops are answered here from the
// catalogs (vault.list, approval.list) or routed to the owner of the
// approval's vault (approval.show, .grant, .deny): catalog.go. Several
// dispatchers may run: the intake consumer is shared, so each request
// goes to one of them.
package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/owners"
	"github.com/avfs/avfs/telemetry"
)

// ErrNoWorkers means no live worker can take a request.
var ErrNoWorkers = errors.New("no live workers")

// Options configure a dispatcher.
type Options struct {
	ID     string
	Logger *slog.Logger
	// Tracer records a route span per request, child of the sender's
	// span; nil means no tracing.
	Tracer trace.TracerProvider
	// Heartbeat is how often the dispatcher heartbeats and looks for
	// dead workers (config fleet.heartbeat); default
	// messages.HeartbeatInterval.
	Heartbeat time.Duration
}

// Dispatcher routes requests to workers.
type Dispatcher struct {
	id      string
	beat    time.Duration // heartbeat and rescue interval
	nc      *nats.Conn
	js      jetstream.JetStream
	members jetstream.KeyValue
	owners  jetstream.KeyValue
	// catalog and approvals answer the namespace ops (catalog.go).
	catalog   jetstream.KeyValue
	approvals jetstream.KeyValue
	log       *slog.Logger
	tracer    trace.Tracer

	mu       sync.Mutex
	live     []messages.Member
	liveRead time.Time
	// placed counts the new vaults this dispatcher gave each worker since
	// live was read: heartbeats lag a burst of creates by seconds.
	placed map[string]int

	// suspects are workers whose consumer exists but whose heartbeat was
	// missing at the last rescue pass: a second miss means dead.
	suspects map[string]bool

	// owned mirrors the owners bucket (set by Run), so routing a request
	// to a live owner costs no KV round trip. Changes (claims,
	// reassignments) still go through compare-and-set on the bucket.
	owned *owners.Cache
}

// New returns a dispatcher on nc; the fleet's streams must exist.
func New(ctx context.Context, nc *nats.Conn, o Options) (*Dispatcher, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = messages.HeartbeatInterval
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	members, err := js.KeyValue(ctx, messages.BucketMembers)
	if err != nil {
		return nil, fmt.Errorf("members bucket: %w", err)
	}
	owners, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		return nil, fmt.Errorf("owners bucket: %w", err)
	}
	catalog, err := js.KeyValue(ctx, messages.BucketCatalog)
	if err != nil {
		return nil, fmt.Errorf("catalog bucket: %w", err)
	}
	approvals, err := js.KeyValue(ctx, messages.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("approvals bucket: %w", err)
	}
	return &Dispatcher{id: o.ID, beat: o.Heartbeat, nc: nc, js: js, members: members, owners: owners, catalog: catalog, approvals: approvals, log: o.Logger.With("dispatcher", o.ID),
		tracer: telemetry.Provider(o.Tracer).Tracer("github.com/avfs/avfs/dispatcher"), suspects: map[string]bool{}}, nil
}

// Run routes until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	owned, err := owners.Watch(ctx, d.owners)
	if err != nil {
		return fmt.Errorf("watch owners: %w", err)
	}
	d.owned = owned
	deadSub, err := d.watchDead(ctx)
	if err != nil {
		return fmt.Errorf("watch dead letters: %w", err)
	}
	defer deadSub.Unsubscribe()
	cons, err := d.js.CreateOrUpdateConsumer(ctx, messages.StreamRequests, jetstream.ConsumerConfig{
		Durable: "dispatch", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second, MaxAckPending: 1024,
	})
	if err != nil {
		return fmt.Errorf("dispatch consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) { d.route(ctx, msg) }, jetstream.PullExpiry(messages.PullExpiry))
	if err != nil {
		return err
	}
	defer cc.Stop()
	t := time.NewTicker(d.beat)
	defer t.Stop()
	d.heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.heartbeat(ctx)
			d.rescue(ctx)
		}
	}
}

// rescue re-routes the unacknowledged work of dead workers: a worker whose
// heartbeat is gone on two passes in a row has its pending requests moved
// to the vaults' new owners. The workers looked at are those with a
// consumer of the work stream and those with requests waiting in it
// without one: a request forwarded to a worker on a listing read just
// before its heartbeat expired can land after its consumer was deleted,
// and nobody else would ever take it.
func (d *Dispatcher) rescue(ctx context.Context) {
	st, err := d.js.Stream(ctx, messages.StreamWork)
	if err != nil {
		return
	}
	d.mu.Lock()
	d.liveRead = time.Time{} // decide on fresh membership
	d.mu.Unlock()
	ids := map[string]bool{}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if id, ok := strings.CutPrefix(name, messages.WorkConsumerPrefix); ok {
			ids[id] = true
		}
	}
	if names.Err() != nil {
		return // decide on a whole listing only
	}
	for _, id := range d.waitingWorkers(ctx, st) {
		ids[id] = true
	}
	var dead []string
	for id := range ids {
		if d.alive(ctx, id) || d.heartbeating(ctx, id) {
			delete(d.suspects, id)
			continue
		}
		if !d.suspects[id] {
			d.suspects[id] = true
			continue
		}
		dead = append(dead, id)
	}
	for id := range d.suspects {
		if !ids[id] {
			delete(d.suspects, id)
		}
	}
	sort.Strings(dead)
	for _, id := range dead {
		delete(d.suspects, id)
		if err := d.rescueWorker(ctx, st, id); err != nil {
			d.log.Warn("rescue", telemetry.LogKeyWorker, id, telemetry.LogKeyErr, err)
		}
	}
}

// waitingWorkers lists the workers that have requests waiting in the work
// stream (messages.WorkSubject: the worker is its fourth token).
func (d *Dispatcher) waitingWorkers(ctx context.Context, st jetstream.Stream) []string {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(messages.SubjectWork+".>"))
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for subj := range info.State.Subjects {
		parts := strings.SplitN(subj, ".", 5)
		if len(parts) == 5 && !seen[parts[3]] {
			seen[parts[3]] = true
			out = append(out, parts[3])
		}
	}
	return out
}

func (d *Dispatcher) rescueWorker(ctx context.Context, st jetstream.Stream, id string) error {
	// Delete the dead worker's consumer first: a work-queue stream allows
	// one consumer per subject, and its unacknowledged messages stay in
	// the stream for the rescue consumer to read at once.
	if err := st.DeleteConsumer(ctx, messages.WorkConsumer(id)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "rescue-" + id, FilterSubject: messages.WorkFilter(id), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return err
	}
	defer st.DeleteConsumer(context.WithoutCancel(ctx), "rescue-"+id)
	moved := 0
	for {
		batch, err := cons.FetchNoWait(64)
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			if err := d.reroute(ctx, msg, id); err != nil {
				msg.Nak()
				return err
			}
			msg.Ack()
			moved++
		}
		if n == 0 {
			break
		}
	}
	d.log.Info("rescued dead worker's requests", telemetry.LogKeyWorker, id, "moved", moved)
	return nil
}

// reroute forwards a request taken from a dead worker to its vault's new
// owner. It gets a new message id: the old one is still inside the work
// stream's deduplication window.
func (d *Dispatcher) reroute(ctx context.Context, msg jetstream.Msg, dead string) error {
	parts := strings.SplitN(msg.Subject(), ".", 7)
	if len(parts) != 7 {
		return fmt.Errorf("bad work subject %q", msg.Subject())
	}
	ns, vault, op := parts[4], parts[5], messages.Op(parts[6])
	if vault == messages.NoVault {
		vault = ""
	}
	w, err := d.place(ctx, ns, vault, op, msg.Headers().Get(messages.HeaderRequestID), msg.Data())
	if err != nil {
		return err
	}
	fwd := nats.NewMsg(messages.WorkSubject(w, ns, vault, op))
	fwd.Data = msg.Data()
	for k, v := range msg.Headers() {
		fwd.Header[k] = v
	}
	fwd.Header.Set(nats.MsgIdHdr, msg.Headers().Get(nats.MsgIdHdr)+".from-"+dead)
	_, err = d.js.PublishMsg(ctx, fwd)
	return err
}

func (d *Dispatcher) heartbeat(ctx context.Context) {
	b, _ := json.Marshal(messages.Member{ID: d.id, Kind: "dispatcher", LastSeen: time.Now().UTC().Format(time.RFC3339Nano)})
	if _, err := d.members.Put(ctx, messages.DispatcherPrefix+d.id, b); err != nil {
		d.log.Warn("heartbeat", telemetry.LogKeyErr, err)
	}
}

func (d *Dispatcher) fail(msg jetstream.Msg, e *messages.Error) {
	if to := msg.Headers().Get(messages.HeaderReplyTo); messages.ValidReplyTo(to) {
		b, _ := json.Marshal(messages.Reply{RequestID: msg.Headers().Get(messages.HeaderRequestID), Error: e})
		d.nc.Publish(to, b)
	}
	msg.Term()
}

func (d *Dispatcher) route(ctx context.Context, msg jetstream.Msg) {
	ctx, span := d.tracer.Start(telemetry.Extract(ctx, msg.Headers()), "route",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("avfs.dispatcher", d.id)))
	defer span.End()
	ns, vault, op, ok := messages.ParseRequestSubject(msg.Subject())
	if !ok {
		span.SetStatus(codes.Error, "bad request subject")
		d.fail(msg, messages.Errorf(messages.CodeInvalidArgument, "bad request subject %q", msg.Subject()))
		return
	}
	span.SetAttributes(attribute.String("avfs.op", string(op)), attribute.String("avfs.namespace", ns), attribute.String("avfs.vault", vault))
	if e := messages.CheckRouting(ns, vault, op, msg.Data()); e != nil {
		// It can never be placed: answered now, never retried.
		span.SetStatus(codes.Error, string(e.Code))
		d.fail(msg, e)
		return
	}
	w, err := d.decide(ctx, msg, &ns, &vault, op)
	if err == nil && w == "" {
		return // answered here
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		md, _ := msg.Metadata()
		if md != nil && md.NumDelivered >= 10 {
			// Give up: keep the request in the dead-letter stream.
			reason := fmt.Sprintf("not placed after %d deliveries: %v", md.NumDelivered, err)
			settle := func() error { return msg.Ack() }
			if derr := d.deadLetter(ctx, ns, vault, op, msg.Headers(), msg.Data(), reason, "", settle); derr != nil {
				d.log.WarnContext(ctx, "dead-letter", telemetry.LogKeyErr, derr)
				d.fail(msg, messages.Errorf(messages.CodeUnavailable, "%v", err))
			}
			return
		}
		msg.NakWithDelay(time.Second)
		return
	}
	fwd := nats.NewMsg(messages.WorkSubject(w, ns, vault, op))
	fwd.Data = msg.Data()
	// The headers travel along, Nats-Msg-Id included, so the work
	// stream deduplicates a forward repeated after a lost ack.
	for k, v := range msg.Headers() {
		fwd.Header[k] = v
	}
	// The worker's process span is a child of this route span.
	span.SetAttributes(attribute.String("avfs.worker", w))
	telemetry.Inject(ctx, fwd.Header)
	if _, err := d.js.PublishMsg(ctx, fwd); err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		d.log.WarnContext(ctx, "forward", telemetry.LogKeyWorker, w, telemetry.LogKeyErr, err)
		msg.NakWithDelay(time.Second)
		return
	}
	msg.Ack()
}

// decide settles where a routable request goes: it answers the
// namespace ops that the catalogs answer (returning ""), answers an
// approval op whose approval does not exist (""), points an approval op
// at its approval's vault (setting *vault), and places the rest. An error
// is worth another try later.
func (d *Dispatcher) decide(ctx context.Context, msg jetstream.Msg, ns, vault *string, op messages.Op) (string, error) {
	if (messages.DispatcherOp(op) || messages.ApprovalOp(op)) && *vault != "" {
		// Permissions deny agents approval decisions on the "_" token:
		// no other token may lead to one.
		d.fail(msg, messages.Errorf(messages.CodeInvalidArgument, "%s is namespace-scoped: its subject's vault token must be %q", op, messages.NoVault))
		return "", nil
	}
	switch {
	case messages.DispatcherOp(op):
		span := trace.SpanFromContext(ctx)
		span.SetAttributes(attribute.Bool("avfs.answered_by_dispatcher", true))
		return "", d.answer(ctx, msg, *ns, op)
	case messages.ApprovalOp(op):
		v, e, err := d.approvalVault(ctx, *ns, msg.Data())
		if err != nil {
			return "", err
		}
		if e != nil {
			trace.SpanFromContext(ctx).SetStatus(codes.Error, string(e.Code))
			d.fail(msg, e)
			return "", nil
		}
		*vault = v
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("avfs.vault", v))
	}
	return d.place(ctx, *ns, *vault, op, msg.Headers().Get(messages.HeaderRequestID), msg.Data())
}

// liveWorkers lists workers with a current heartbeat, least loaded first;
// cached for a second so routing costs no KV round trip per request.
func (d *Dispatcher) liveWorkers(ctx context.Context) ([]messages.Member, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.liveRead) < min(time.Second, d.beat) && len(d.live) > 0 {
		return d.live, nil
	}
	keys, err := d.members.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []messages.Member
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, messages.WorkerPrefix) {
			continue
		}
		e, err := d.members.Get(ctx, k)
		if err != nil {
			continue
		}
		var m messages.Member
		if json.Unmarshal(e.Value(), &m) == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Load != out[j].Load {
			return out[i].Load < out[j].Load
		}
		return out[i].Vaults < out[j].Vaults
	})
	d.live, d.liveRead, d.placed = out, time.Now(), map[string]int{}
	return out, nil
}

func (d *Dispatcher) alive(ctx context.Context, id string) bool {
	ws, err := d.liveWorkers(ctx)
	if err != nil {
		return false
	}
	for _, w := range ws {
		if w.ID == id {
			return true
		}
	}
	return false
}

// heartbeating reads worker id's heartbeat key itself. A worker missing
// from the cached listing is checked here before it is declared dead:
// a listing can miss a key that is being rewritten, and taking a vault
// from a live worker costs its changes since the last push.
func (d *Dispatcher) heartbeating(ctx context.Context, id string) bool {
	_, err := d.members.Get(ctx, messages.WorkerPrefix+id)
	// Only a missing key is death; a failed read (a NATS hiccup) is not.
	return !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted)
}

// leastLoaded picks a worker for new work: among the workers whose load
// is within loadSlack of the least, the one holding the fewest vaults,
// counting those placed since the last heartbeat read, so a burst of new
// vaults is spread instead of all landing on one worker between
// heartbeats; ties are broken by a hash of spread. claim says the worker
// is to hold a new vault.
func (d *Dispatcher) leastLoaded(ctx context.Context, spread string, claim bool) (string, error) {
	ws, err := d.liveWorkers(ctx)
	if err != nil {
		return "", err
	}
	if len(ws) == 0 {
		return "", ErrNoWorkers
	}
	const loadSlack = 0.25
	d.mu.Lock()
	defer d.mu.Unlock()
	h := 0
	for _, c := range spread {
		h = h*31 + int(c)
	}
	if h < 0 {
		h = -h
	}
	var best []string
	bestVaults := 0
	for _, w := range ws {
		if w.Load > ws[0].Load+loadSlack {
			continue
		}
		n := w.Vaults + d.placed[w.ID]
		switch {
		case len(best) == 0 || n < bestVaults:
			best, bestVaults = []string{w.ID}, n
		case n == bestVaults:
			best = append(best, w.ID)
		}
	}
	id := best[h%len(best)]
	if claim && d.placed != nil {
		d.placed[id]++
	}
	return id, nil
}

// place finds the worker for request rid, claiming or reassigning
// ownership.
func (d *Dispatcher) place(ctx context.Context, ns, vault string, op messages.Op, rid string, body []byte) (string, error) {
	if vault == "" {
		return d.leastLoaded(ctx, ns, false)
	}
	key := messages.VaultKey(ns, vault)
	o, cached := d.owned.Cached(ns, vault)
	if cached && op != messages.OpVaultFork && d.alive(ctx, o.Worker) {
		return o.Worker, nil
	}
	for try := 0; try < 5; try++ {
		e, err := d.owners.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			w, err := d.leastLoaded(ctx, key, true)
			if err != nil {
				return "", err
			}
			b, _ := json.Marshal(messages.Owner{Worker: w, Epoch: 1, Request: rid})
			if _, err := d.owners.Create(ctx, key, b); err != nil {
				continue // another dispatcher claimed it first: read again
			}
			return w, d.afterPlace(ctx, ns, w, op, rid, body)
		case err != nil:
			return "", err
		}
		var o messages.Owner
		if err := json.Unmarshal(e.Value(), &o); err != nil {
			return "", err
		}
		if d.alive(ctx, o.Worker) || d.heartbeating(ctx, o.Worker) {
			return o.Worker, d.afterPlace(ctx, ns, o.Worker, op, rid, body)
		}
		// The owner's heartbeat expired: hand the vault to a live worker.
		// The epoch fences the old owner if it comes back.
		w, err := d.leastLoaded(ctx, key, true)
		if err != nil {
			return "", err
		}
		b, _ := json.Marshal(messages.Owner{Worker: w, Epoch: o.Epoch + 1})
		if _, err := d.owners.Update(ctx, key, b, e.Revision()); err != nil {
			continue
		}
		d.log.Info("reassigned vault", telemetry.LogKeyVault, key, "from", o.Worker, "to", w, telemetry.LogKeyEpoch, o.Epoch+1)
		return w, d.afterPlace(ctx, ns, w, op, rid, body)
	}
	return "", fmt.Errorf("place %s: ownership kept changing", key)
}

// afterPlace records what a request will create: a fork's target lives
// where its source does (w), since they share content, unless the fork
// asks to be spread: then on the least loaded worker, which fetches the
// content it lacks. A target that already has an owner keeps it; the
// source's worker refuses the fork if that vault exists.
func (d *Dispatcher) afterPlace(ctx context.Context, ns, w string, op messages.Op, rid string, body []byte) error {
	if op != messages.OpVaultFork {
		return nil
	}
	var req messages.Request
	var args messages.VaultForkArgs
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(req.Args, &args) != nil || args.Target == "" {
		return nil // the worker answers the malformed request
	}
	key := messages.VaultKey(ns, args.Target)
	if args.Placement == messages.PlacementSpread {
		t, err := d.leastLoaded(ctx, key, true)
		if err != nil {
			return err
		}
		w = t
	}
	b, _ := json.Marshal(messages.Owner{Worker: w, Epoch: 1, Request: rid})
	if _, err := d.owners.Create(ctx, key, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	return nil
}

// Status reads the fleet's membership.
func Status(ctx context.Context, js jetstream.JetStream) (messages.FleetStatus, error) {
	kv, err := js.KeyValue(ctx, messages.BucketMembers)
	if err != nil {
		return messages.FleetStatus{}, err
	}
	out := messages.FleetStatus{Workers: []messages.Member{}}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return out, err
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var m messages.Member
		if json.Unmarshal(e.Value(), &m) != nil {
			continue
		}
		if m.Kind == "dispatcher" {
			out.Dispatchers++
		} else {
			out.Workers = append(out.Workers, m)
		}
	}
	sort.Slice(out.Workers, func(i, j int) bool { return out.Workers[i].ID < out.Workers[j].ID })
	return out, nil
}
