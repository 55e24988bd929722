package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// askWorker sends a request straight to worker w's work subject, past the
// dispatcher, so the test decides which worker answers it.
func (f *fleet) askWorker(w, ns, vault string, op messages.Op, args any) messages.Reply {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := f.conn()
	js, _ := jetstream.New(nc)
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		f.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	req := messages.Request{Op: op, Namespace: ns, Vault: vault, RequestID: fmt.Sprintf("direct-%s-%d", op, time.Now().UnixNano()), Actor: "test"}
	if args != nil {
		req.Args, _ = json.Marshal(args)
	}
	m := nats.NewMsg(messages.WorkSubject(w, ns, vault, op))
	m.Data, _ = json.Marshal(req)
	m.Header.Set(messages.HeaderReplyTo, inbox)
	m.Header.Set(messages.HeaderRequestID, req.RequestID)
	m.Header.Set(nats.MsgIdHdr, req.RequestID)
	dl, _ := ctx.Deadline()
	m.Header.Set(messages.HeaderDeadline, dl.UTC().Format(time.RFC3339Nano))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		f.t.Fatal(err)
	}
	rm, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		f.t.Fatalf("%s on %s: no reply: %v", op, w, err)
	}
	var rep messages.Reply
	if err := json.Unmarshal(rm.Data, &rep); err != nil {
		f.t.Fatal(err)
	}
	return rep
}

// TestNamespaceOpsSpanWorkerStores runs two workers with a store each (two
// machines, as far as stores go): vault.list must show the vaults of
// both, once each, and an approval held on one worker must be listed,
// shown and granted through the other, the command running once.
func TestNamespaceOpsSpanWorkerStores(t *testing.T) {
	f := startFleet(t)
	stA := f.addWorker("wa")
	stB := f.addWorker("wb")
	c := f.client()
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	okv, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}

	// Placement spreads new vaults over idle workers by name: create
	// until each worker owns some.
	owner := map[string]string{}
	byWorker := map[string][]string{}
	for i := 0; len(owner) < 6 || len(byWorker) < 2; i++ {
		if i == 24 {
			t.Fatalf("24 vaults all placed on %v", byWorker)
		}
		name := fmt.Sprintf("pv%02d", i)
		if err := c.Call(ctx, "default", name, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
			t.Fatal(err)
		}
		w := ownerOf(ctx, okv, "default", name)
		owner[name] = w
		byWorker[w] = append(byWorker[w], name)
	}
	onB := byWorker["wb"][0]

	// A copy of one of wb's vaults in wa's store too (as a worker keeps
	// after it forked a vault for another worker, or after the vault
	// moved away): the list must still show it once, as its owner
	// reports it.
	file := filepath.Join(t.TempDir(), "copy.db")
	if _, err := stB.Export(ctx, "default", onB, file); err != nil {
		t.Fatal(err)
	}
	if _, err := stA.Import(ctx, file, "default", onB, vault.Meta{}); err != nil {
		t.Fatal(err)
	}

	checkList := func(how string, rep messages.Reply) {
		t.Helper()
		if rep.Error != nil {
			t.Fatalf("vault.list %s: %v", how, rep.Error)
		}
		var list messages.VaultListResult
		json.Unmarshal(rep.Result, &list)
		got := map[string]int{}
		var names []string
		for _, v := range list.Vaults {
			got[v.Name]++
			names = append(names, v.Name)
			if w := owner[v.Name]; w != "" && v.Worker != w {
				t.Errorf("vault.list %s: %s reported by %s, want its owner %s", how, v.Name, v.Worker, w)
			}
		}
		for name := range owner {
			if got[name] != 1 {
				t.Errorf("vault.list %s: %s listed %d times, want 1 (got %v)", how, name, got[name], names)
			}
		}
		for i := 1; i < len(names); i++ {
			if names[i-1] >= names[i] {
				t.Errorf("vault.list %s: not sorted by name: %v", how, names)
				break
			}
		}
	}
	var viaClient messages.VaultListResult
	if err := c.Call(ctx, "default", "", messages.OpVaultList, nil, &viaClient); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(viaClient)
	checkList("through the client", messages.Reply{Result: b})
	checkList("on wa", f.askWorker("wa", "default", "", messages.OpVaultList, nil))
	checkList("on wb", f.askWorker("wb", "default", "", messages.OpVaultList, nil))

	// A command held for approval on wb; wa's store knows nothing of it.
	env, err := c.Exec(ctx, "default", onB, messages.ExecArgs{Shell: "git push; echo ran >> ran.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusApprovalRequired || env.ApprovalID == nil || env.Worker != "wb" {
		t.Fatalf("held exec: status %s worker %s approval %v", env.Status, env.Worker, env.ApprovalID)
	}
	id := *env.ApprovalID

	rep := f.askWorker("wa", "default", "", messages.OpApprovalList, nil)
	var al messages.ApprovalListResult
	if rep.Error != nil || json.Unmarshal(rep.Result, &al) != nil {
		t.Fatalf("approval.list on wa: %v", rep.Error)
	}
	if len(al.Approvals) != 1 || al.Approvals[0].ID != id || al.Approvals[0].Status != "pending" {
		t.Fatalf("approval.list on wa: got %+v, want %s pending once", al.Approvals, id)
	}
	var ar messages.ApprovalResult
	rep = f.askWorker("wa", "default", "", messages.OpApprovalShow, messages.ApprovalArgs{ID: id})
	if rep.Error != nil || json.Unmarshal(rep.Result, &ar) != nil || ar.Approval.ID != id || ar.Approval.Vault != onB {
		t.Fatalf("approval.show on wa: %v %s", rep.Error, rep.Result)
	}
	rep = f.askWorker("wa", "default", "", messages.OpApprovalShow, messages.ApprovalArgs{ID: "apr-nope"})
	if rep.Error == nil || rep.Error.Code != messages.CodeApprovalNotFound {
		t.Fatalf("approval.show of a missing id on wa: got %v, want %s", rep.Error, messages.CodeApprovalNotFound)
	}

	rep = f.askWorker("wa", "default", "", messages.OpApprovalGrant, messages.ApprovalArgs{ID: id, Reason: "ok"})
	if rep.Error != nil || json.Unmarshal(rep.Result, &ar) != nil {
		t.Fatalf("approval.grant on wa: %v", rep.Error)
	}
	if ar.Approval.Status != "granted" || ar.Approval.Envelope == nil || ar.Approval.Envelope.Status != messages.StatusCompleted || ar.Approval.Envelope.Worker != "wb" {
		t.Fatalf("approval.grant on wa: got %+v, want granted, run on wb", ar.Approval)
	}
	rep = f.askWorker("wa", "default", "", messages.OpApprovalGrant, messages.ApprovalArgs{ID: id})
	if rep.Error == nil || rep.Error.Code != messages.CodeConflict {
		t.Fatalf("second grant on wa: got %v, want %s", rep.Error, messages.CodeConflict)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", onB, messages.OpCat, messages.PathArgs{Path: "/ran.txt"}, &cat); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(*cat.Content, "ran"); got != 1 {
		t.Fatalf("the granted command ran %d times, want 1", got)
	}

	// A live member that never answers its peer subject is skipped after
	// a short wait; the others' vaults are still listed.
	mkv, err := js.KeyValue(ctx, messages.BucketMembers)
	if err != nil {
		t.Fatal(err)
	}
	ghost, _ := json.Marshal(messages.Member{ID: "ghost", Kind: "worker", LastSeen: time.Now().UTC().Format(time.RFC3339Nano)})
	if _, err := mkv.Put(ctx, "worker.ghost", ghost); err != nil {
		t.Fatal(err)
	}
	mc := f.conn()
	mute, err := mc.SubscribeSync(messages.SubjectPeer + ".ghost.>")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Unsubscribe()
	// The server must have the subscription before wa asks: without the
	// flush the request could reach the server first, under load.
	if err := mc.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep = f.askWorker("wa", "default", "", messages.OpVaultList, nil)
	checkList("with a mute peer", rep)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("vault.list waited %v for a mute peer", took)
	}
	// The answer says it may be incomplete, and why.
	var partial messages.VaultListResult
	json.Unmarshal(rep.Result, &partial)
	if len(partial.Unanswered) != 1 || partial.Unanswered[0] != "ghost" {
		t.Fatalf("unanswered workers %v, want [ghost]", partial.Unanswered)
	}
	if _, err := mute.NextMsg(time.Second); err != nil {
		t.Fatalf("the mute peer was never asked: %v", err)
	}
}
