package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/poll"
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
// machines, as far as stores go): vault.list, answered by the dispatcher
// from the vault catalog, must show the vaults of both, once each; an
// approval held on one worker must be listed, shown and granted through
// the dispatcher, the command running once on its vault's worker; and a
// stopped worker's vaults and approvals stay listed.
func TestNamespaceOpsSpanWorkerStores(t *testing.T) {
	f := startFleet(t)
	stA := f.addWorker("wa")
	stB, stopB := startStoppableWorker(t, f.conn(), "wb", nil, nil)
	f.waitMembers("wb")
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

	checkList := func(how string) {
		t.Helper()
		var list messages.VaultListResult
		if err := c.Call(ctx, "default", "", messages.OpVaultList, nil, &list); err != nil {
			t.Fatalf("vault.list %s: %v", how, err)
		}
		got := map[string]int{}
		var names []string
		for _, v := range list.Vaults {
			got[v.Name]++
			names = append(names, v.Name)
			if w := owner[v.Name]; w != "" && v.Worker != w {
				t.Errorf("vault.list %s: %s reported on %s, want its owner %s", how, v.Name, v.Worker, w)
			}
		}
		for name := range owner {
			if got[name] != 1 {
				t.Errorf("vault.list %s: %s listed %d times, want 1 (got %v)", how, name, got[name], names)
			}
		}
		if len(names) != len(owner) {
			t.Errorf("vault.list %s: %v, want exactly the %d vaults created", how, names, len(owner))
		}
		for i := 1; i < len(names); i++ {
			if names[i-1] >= names[i] {
				t.Errorf("vault.list %s: not sorted by name: %v", how, names)
				break
			}
		}
	}
	checkList("with both workers")

	// A command held for approval on wb; wa's store knows nothing of it.
	env, err := c.Exec(ctx, "default", onB, messages.ExecArgs{Shell: "git push; echo ran >> ran.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusApprovalRequired || env.ApprovalID == nil || env.Worker != "wb" {
		t.Fatalf("held exec: status %s worker %s approval %v", env.Status, env.Worker, env.ApprovalID)
	}
	id := *env.ApprovalID
	checkApprovals := func(how, status string) {
		t.Helper()
		var al messages.ApprovalListResult
		if err := c.Call(ctx, "default", "", messages.OpApprovalList, nil, &al); err != nil {
			t.Fatalf("approval.list %s: %v", how, err)
		}
		if len(al.Approvals) != 1 || al.Approvals[0].ID != id || al.Approvals[0].Status != status || al.Approvals[0].Vault != onB {
			t.Fatalf("approval.list %s: got %+v, want %s of %s %s once", how, al.Approvals, id, onB, status)
		}
	}
	checkApprovals("once held", "pending")

	var ar messages.ApprovalResult
	if err := c.Call(ctx, "default", "", messages.OpApprovalShow, messages.ApprovalArgs{ID: id}, &ar); err != nil || ar.Approval.ID != id || ar.Approval.Vault != onB {
		t.Fatalf("approval.show: %v %+v", err, ar.Approval)
	}
	var me *messages.Error
	if err := c.Call(ctx, "default", "", messages.OpApprovalShow, messages.ApprovalArgs{ID: "apr-nope"}, nil); !errors.As(err, &me) || me.Code != messages.CodeApprovalNotFound {
		t.Fatalf("approval.show of a missing id: got %v, want %s", err, messages.CodeApprovalNotFound)
	}
	// Another namespace does not see it.
	if err := c.Call(ctx, "other", "", messages.OpApprovalShow, messages.ApprovalArgs{ID: id}, nil); !errors.As(err, &me) || me.Code != messages.CodeApprovalNotFound {
		t.Fatalf("approval.show from another namespace: got %v, want %s", err, messages.CodeApprovalNotFound)
	}
	// Sent to the worker that does not own the vault, an approval op is
	// sent back for routing, and answered by the owner.
	rep := f.askWorker("wa", "default", onB, messages.OpApprovalShow, messages.ApprovalArgs{ID: id})
	if rep.Error != nil || json.Unmarshal(rep.Result, &ar) != nil || ar.Approval.ID != id {
		t.Fatalf("approval.show sent to wa: %v %s", rep.Error, rep.Result)
	}

	if err := c.Call(ctx, "default", "", messages.OpApprovalGrant, messages.ApprovalArgs{ID: id, Reason: "ok"}, &ar); err != nil {
		t.Fatalf("approval.grant: %v", err)
	}
	if ar.Approval.Status != "granted" || ar.Approval.Envelope == nil || ar.Approval.Envelope.Status != messages.StatusCompleted || ar.Approval.Envelope.Worker != "wb" {
		t.Fatalf("approval.grant: got %+v, want granted, run on wb", ar.Approval)
	}
	if err := c.Call(ctx, "default", "", messages.OpApprovalGrant, messages.ApprovalArgs{ID: id}, nil); !errors.As(err, &me) || me.Code != messages.CodeConflict {
		t.Fatalf("second grant: got %v, want %s", err, messages.CodeConflict)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", onB, messages.OpCat, messages.PathArgs{Path: "/ran.txt"}, &cat); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(*cat.Content, "ran"); got != 1 {
		t.Fatalf("the granted command ran %d times, want 1", got)
	}
	checkApprovals("once granted", "granted")

	// A vault's entry follows its changes: the file the command wrote
	// is counted soon after.
	poll.Until(t, 30*time.Second, "the catalog counts ran.txt", func() (bool, error) {
		var list messages.VaultListResult
		if err := c.Call(ctx, "default", "", messages.OpVaultList, nil, &list); err != nil {
			return false, err
		}
		for _, v := range list.Vaults {
			if v.Name == onB {
				return v.Files == 1, fmt.Errorf("%s lists %d files", onB, v.Files)
			}
		}
		return false, fmt.Errorf("%s not listed", onB)
	})

	// wb stops: nothing answers for its vaults until a dispatcher moves
	// them, yet the lists stay whole.
	stopB()
	checkList("with wb stopped")
	checkApprovals("with wb stopped", "granted")

	// A vault made in wb's store while no worker served it (the CLI
	// in-process) is listed once a worker serves that store again.
	if _, err := stB.Create(ctx, "default", "offline", vault.Quota{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	serveStore(t, f.conn(), "wb", t.TempDir(), stB, nil, nil)
	owner["offline"] = ""
	poll.Until(t, 30*time.Second, "the vault made offline listed", func() (bool, error) {
		var list messages.VaultListResult
		if err := c.Call(ctx, "default", "", messages.OpVaultList, nil, &list); err != nil {
			return false, err
		}
		return len(list.Vaults) == len(owner), fmt.Errorf("%d vaults listed, want %d", len(list.Vaults), len(owner))
	})
	checkList("with wb back")
}
