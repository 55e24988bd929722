package dispatcher

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// putJSON writes v under key in the bucket named by which.
func (r *rig) putJSON(which, key string, v any) {
	r.t.Helper()
	b, _ := json.Marshal(v)
	kv := map[string]func() error{
		messages.BucketCatalog:   func() error { _, err := r.catalog.Put(r.ctx, key, b); return err },
		messages.BucketApprovals: func() error { _, err := r.aprs.Put(r.ctx, key, b); return err },
		messages.BucketOwners:    func() error { _, err := r.owners.Put(r.ctx, key, b); return err },
	}[which]
	if err := kv(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) call(ns string, op messages.Op, args, out any) *messages.Error {
	r.t.Helper()
	rep := r.reply(r.send(ns, "", op, fmt.Sprintf("%s-%d", op, time.Now().UnixNano()), args))
	if rep.Error == nil && out != nil {
		if err := json.Unmarshal(rep.Result, out); err != nil {
			r.t.Fatal(err)
		}
	}
	return rep.Error
}

// TestVaultListIsTheCatalog: vault.list is answered by the dispatcher
// from the catalog, with no worker alive: every entry of the namespace,
// sorted, none short even right after the writes; each with the worker
// avfs_owners names.
func TestVaultListIsTheCatalog(t *testing.T) {
	r := newRig(t)
	const n = 150
	for i := n - 1; i >= 0; i-- {
		name := fmt.Sprintf("v%03d", i)
		r.putJSON(messages.BucketCatalog, messages.VaultKey("team", name), messages.VaultInfo{Name: name, Namespace: "team", Files: int64(i), Worker: "old"})
	}
	r.putJSON(messages.BucketCatalog, messages.VaultKey("other", "x"), messages.VaultInfo{Name: "x", Namespace: "other"})
	var list messages.VaultListResult
	if e := r.call("team", messages.OpVaultList, nil, &list); e != nil {
		t.Fatal(e)
	}
	if len(list.Vaults) != n {
		t.Fatalf("vault.list right after %d catalog writes: %d vaults, want %d", n, len(list.Vaults), n)
	}
	for i, v := range list.Vaults {
		if want := fmt.Sprintf("v%03d", i); v.Name != want || v.Files != int64(i) || v.Namespace != "team" {
			t.Fatalf("vault %d: %+v, want %s with %d files", i, v, want, i)
		}
	}
	// The owner record, not the entry, says which worker serves it.
	r.putJSON(messages.BucketOwners, messages.VaultKey("team", "v007"), messages.Owner{Worker: "new", Epoch: 2})
	poll.Until(t, 30*time.Second, "v007 listed on its owner", func() (bool, error) {
		var list messages.VaultListResult
		if e := r.call("team", messages.OpVaultList, nil, &list); e != nil {
			return false, e
		}
		return list.Vaults[7].Worker == "new", fmt.Errorf("v007 on %q", list.Vaults[7].Worker)
	})
	if e := r.call("nobody", messages.OpVaultList, nil, &list); e != nil || len(list.Vaults) != 0 || list.Vaults == nil {
		t.Fatalf("vault.list of an empty namespace: %+v %v, want [] ", list, e)
	}
	// Args it does not take, and a vault token, are refused.
	if e := r.call("team", messages.OpVaultList, map[string]int{"x": 1}, nil); e == nil || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("vault.list with args: %v, want %s", e, messages.CodeInvalidArgument)
	}
	if rep := r.reply(r.send("team", "v001", messages.OpVaultList, "tok", nil)); rep.Error == nil || rep.Error.Code != messages.CodeInvalidArgument {
		t.Fatalf("vault.list on a vault token: %+v, want %s", rep, messages.CodeInvalidArgument)
	}
}

// TestApprovalsAreRoutedToTheirVault: approval.list comes from the
// approval index (expired ones listed so, newest first); a decision goes
// to the owner of the approval's vault, on the vault's work subject; an
// unknown id is APPROVAL_NOT_FOUND at once; and no vault token but "_"
// leads to a decision.
func TestApprovalsAreRoutedToTheirVault(t *testing.T) {
	r := newRig(t)
	r.beat("wa", "wb")
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	r.putJSON(messages.BucketApprovals, "default.apr-old", messages.Approval{ID: "apr-old", Namespace: "default", Vault: "v",
		Status: "pending", RequestedAt: ts(-2 * time.Hour), ExpiresAt: ts(-time.Hour)})
	r.putJSON(messages.BucketApprovals, "default.apr-new", messages.Approval{ID: "apr-new", Namespace: "default", Vault: "v",
		Status: "pending", RequestedAt: ts(-time.Minute), ExpiresAt: ts(time.Hour)})
	r.putJSON(messages.BucketOwners, messages.VaultKey("default", "v"), messages.Owner{Worker: "wb", Epoch: 1})

	var al messages.ApprovalListResult
	if e := r.call("default", messages.OpApprovalList, nil, &al); e != nil {
		t.Fatal(e)
	}
	if len(al.Approvals) != 2 || al.Approvals[0].ID != "apr-new" || al.Approvals[0].Status != "pending" ||
		al.Approvals[1].ID != "apr-old" || al.Approvals[1].Status != "expired" {
		t.Fatalf("approval.list: %+v, want apr-new pending, then apr-old expired", al.Approvals)
	}

	toB, err := r.nc.SubscribeSync(messages.SubjectWork + ".wb.>")
	if err != nil {
		t.Fatal(err)
	}
	r.send("default", "", messages.OpApprovalGrant, "g1", messages.ApprovalArgs{ID: "apr-new"})
	m, err := toB.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the grant never reached the vault's owner: %v", err)
	}
	if want := messages.WorkSubject("wb", "default", "v", messages.OpApprovalGrant); m.Subject != want {
		t.Fatalf("grant forwarded on %s, want %s", m.Subject, want)
	}
	if req, e := messages.DecodeWork(m.Subject, m.Data); e != nil || req.Vault != "v" || req.Op != messages.OpApprovalGrant {
		t.Fatalf("the worker reads the grant as %+v (%v), want approval.grant on v", req, e)
	}

	if e := r.call("default", messages.OpApprovalShow, messages.ApprovalArgs{ID: "apr-none"}, nil); e == nil || e.Code != messages.CodeApprovalNotFound {
		t.Fatalf("approval.show of an unknown id: %v, want %s", e, messages.CodeApprovalNotFound)
	}
	if e := r.call("other", messages.OpApprovalGrant, messages.ApprovalArgs{ID: "apr-new"}, nil); e == nil || e.Code != messages.CodeApprovalNotFound {
		t.Fatalf("approval.grant from another namespace: %v, want %s", e, messages.CodeApprovalNotFound)
	}
	if rep := r.reply(r.send("default", "v", messages.OpApprovalGrant, "g2", messages.ApprovalArgs{ID: "apr-new"})); rep.Error == nil || rep.Error.Code != messages.CodeInvalidArgument {
		t.Fatalf("approval.grant on a vault token: %+v, want %s", rep, messages.CodeInvalidArgument)
	}
	if m, err := toB.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a refused decision reached the worker: %s", m.Subject)
	}
}

// TestVaultListWholeWhileEntriesChange: owners rewrite their entries
// all the time (counts after each change); a list asked meanwhile still
// holds every vault, once.
func TestVaultListWholeWhileEntriesChange(t *testing.T) {
	r := newRig(t)
	const n = 64
	for i := range n {
		name := fmt.Sprintf("v%02d", i)
		r.putJSON(messages.BucketCatalog, messages.VaultKey("team", name), messages.VaultInfo{Name: name, Namespace: "team"})
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("v%02d", i%n)
			b, _ := json.Marshal(messages.VaultInfo{Name: name, Namespace: "team", Files: int64(i)})
			r.catalog.Put(r.ctx, messages.VaultKey("team", name), b)
		}
	}()
	defer func() { close(stop); <-done }()
	for try := range 40 {
		var list messages.VaultListResult
		if e := r.call("team", messages.OpVaultList, nil, &list); e != nil {
			t.Fatal(e)
		}
		seen := map[string]bool{}
		for _, v := range list.Vaults {
			seen[v.Name] = true
		}
		if len(list.Vaults) != n || len(seen) != n {
			t.Fatalf("list %d while entries change: %d vaults (%d names), want %d once each", try, len(list.Vaults), len(seen), n)
		}
	}
}
