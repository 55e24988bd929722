package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// Namespace-scoped ops (messages/subjects.go, "The catalogs"): the
// dispatcher answers vault.list and approval.list itself, from
// BucketCatalog and BucketApprovals, and routes approval.show, .grant and
// .deny to the owner of the approval's vault. No worker asks another.

// catalogRead bounds one read of a catalog: past it the request is put
// back for another try, as when placement fails.
const catalogRead = 10 * time.Second

// errWatchEnded means a catalog watch closed before its initial values
// were in.
var errWatchEnded = errors.New("catalog watch ended early")

// readNamespace returns the current entries of namespace ns in kv: every
// entry written before the call. A watch delivers the values in one pass,
// but its end-of-initial-values marker comes from the consumer's pending
// count and was seen to come one entry early while other keys changed
// (a list of 63 vaults of 64); so the keys the stream holds for ns are
// read too, and a key the watch missed is read on its own. (A no-wait
// fetch of a new consumer would miss even more: it can come back before
// the server delivered anything.)
func readNamespace(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, ns string) ([]jetstream.KeyValueEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogRead)
	defer cancel()
	fail := func(err error) ([]jetstream.KeyValueEntry, error) {
		return nil, fmt.Errorf("read %s of %s: %w", kv.Bucket(), ns, err)
	}
	w, err := kv.Watch(ctx, messages.NamespaceKeys(ns), jetstream.IgnoreDeletes())
	if err != nil {
		return fail(err)
	}
	defer w.Stop()
	// By key, the latest revision: a consumer the client library had to
	// recreate (a gap under load) delivers some entries again.
	byKey := map[string]jetstream.KeyValueEntry{}
watch:
	for {
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return fail(errWatchEnded)
			case e == nil:
				break watch
			}
			if prev, ok := byKey[e.Key()]; !ok || e.Revision() > prev.Revision() {
				byKey[e.Key()] = e
			}
		}
	}
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return fail(err)
	}
	prefix := "$KV." + kv.Bucket() + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+messages.NamespaceKeys(ns)))
	if err != nil {
		return fail(err)
	}
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, prefix)
		if _, ok := byKey[key]; ok {
			continue
		}
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // deleted: its last message is the delete marker
		case err != nil:
			return fail(err)
		}
		byKey[key] = e
	}
	out := make([]jetstream.KeyValueEntry, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, e)
	}
	return out, nil
}

// vaultList answers vault.list for ns: every vault of the catalog, by
// name, each with its worker as BucketOwners names it (the catalog entry
// may predate a reassignment).
func (d *Dispatcher) vaultList(ctx context.Context, ns string) (messages.VaultListResult, error) {
	es, err := readNamespace(ctx, d.js, d.catalog, ns)
	if err != nil {
		return messages.VaultListResult{}, err
	}
	out := messages.VaultListResult{Vaults: make([]messages.VaultInfo, 0, len(es))}
	for _, e := range es {
		var v messages.VaultInfo
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			d.log.WarnContext(ctx, "catalog entry unreadable", "key", e.Key(), telemetry.LogKeyErr, err)
			continue
		}
		if o, ok := d.owned.Cached(ns, v.Name); ok {
			v.Worker = o.Worker
		}
		out.Vaults = append(out.Vaults, v)
	}
	sort.Slice(out.Vaults, func(i, j int) bool { return out.Vaults[i].Name < out.Vaults[j].Name })
	return out, nil
}

// approvalList answers approval.list for ns, newest first, as a store
// lists them: a pending approval past its expiry shows as expired.
func (d *Dispatcher) approvalList(ctx context.Context, ns string) (messages.ApprovalListResult, error) {
	es, err := readNamespace(ctx, d.js, d.approvals, ns)
	if err != nil {
		return messages.ApprovalListResult{}, err
	}
	now := time.Now()
	out := messages.ApprovalListResult{Approvals: make([]messages.Approval, 0, len(es))}
	for _, e := range es {
		var a messages.Approval
		if err := json.Unmarshal(e.Value(), &a); err != nil {
			d.log.WarnContext(ctx, "approval entry unreadable", "key", e.Key(), telemetry.LogKeyErr, err)
			continue
		}
		if exp, err := time.Parse(time.RFC3339Nano, a.ExpiresAt); err == nil && a.Status == "pending" && now.After(exp) {
			a.Status = "expired"
		}
		a.Envelope = nil
		out.Approvals = append(out.Approvals, a)
	}
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339Nano, s); return t }
	sort.SliceStable(out.Approvals, func(i, j int) bool {
		if ti, tj := at(out.Approvals[i].RequestedAt), at(out.Approvals[j].RequestedAt); !ti.Equal(tj) {
			return ti.After(tj)
		}
		return out.Approvals[i].ID < out.Approvals[j].ID
	})
	return out, nil
}

// answer serves a DispatcherOp; a failed catalog read puts the request
// back for another try.
func (d *Dispatcher) answer(ctx context.Context, msg jetstream.Msg, ns string, op messages.Op) error {
	// Checked as a worker checks what it serves: the subject is
	// authoritative, and the op takes no args.
	req, e := messages.Decode(ns, "", op, msg.Data())
	if e == nil && !noArgs(req.Args) {
		e = messages.Errorf(messages.CodeInvalidArgument, "%s takes no args", op)
	}
	if e != nil {
		trace.SpanFromContext(ctx).SetStatus(codes.Error, string(e.Code))
		d.fail(msg, e)
		return nil
	}
	var res any
	var err error
	if op == messages.OpVaultList {
		res, err = d.vaultList(ctx, ns)
	} else {
		res, err = d.approvalList(ctx, ns)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	d.reply(msg, messages.Reply{RequestID: req.RequestID, Result: b})
	msg.Ack()
	return nil
}

// noArgs reports whether args is absent, null or an empty object.
func noArgs(args json.RawMessage) bool {
	if len(bytes.TrimSpace(args)) == 0 {
		return true
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(args, &m) == nil && len(m) == 0
}

// reply publishes rep to the caller's inbox, if it named a valid one.
func (d *Dispatcher) reply(msg jetstream.Msg, rep messages.Reply) {
	to := msg.Headers().Get(messages.HeaderReplyTo)
	if !messages.ValidReplyTo(to) {
		return
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return
	}
	if err := d.nc.Publish(to, b); err != nil {
		d.log.Warn("reply", telemetry.LogKeyRequest, rep.RequestID, telemetry.LogKeyErr, err)
	}
}

// approvalVault finds the vault of the approval an ApprovalOp names. A
// missing approval is answered with e; err is a failed read, worth
// another try.
func (d *Dispatcher) approvalVault(ctx context.Context, ns string, body []byte) (vault string, e *messages.Error, err error) {
	var req messages.Request
	var args messages.ApprovalArgs
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(req.Args, &args) != nil {
		return "", messages.Errorf(messages.CodeInvalidArgument, "%s: malformed request", req.Op), nil
	}
	notFound := messages.Errorf(messages.CodeApprovalNotFound, "approval %q not found in namespace %s", args.ID, ns)
	key, ok := messages.ApprovalKey(ns, args.ID)
	if !ok {
		return "", notFound, nil
	}
	ctx, cancel := context.WithTimeout(ctx, catalogRead)
	defer cancel()
	ent, err := d.approvals.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", notFound, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("approval %s: %w", args.ID, err)
	}
	var a messages.Approval
	if err := json.Unmarshal(ent.Value(), &a); err != nil || a.Vault == "" {
		return "", notFound, nil
	}
	return a.Vault, nil, nil
}
