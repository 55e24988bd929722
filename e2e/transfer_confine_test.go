package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/internal/transfer"
	"github.com/avfs/avfs/messages"
)

// transferPublish is what an agent may publish to use its namespace's
// transfer bucket and nothing else (docs/nats-permissions.example.conf):
// put objects, look the stream up, read with direct gets, delete.
func transferPublish(ns string) []string {
	b := messages.TransferBucket(ns)
	st := transfer.Stream(b)
	return []string{"$O." + b + ".>", "$JS.API.STREAM.INFO." + st, "$JS.API.DIRECT.GET." + st, "$JS.API.DIRECT.GET." + st + ".>",
		"$JS.API.STREAM.PURGE." + st}
}

// TestTenantTransfersStayApart runs two confined tenants (the example
// permissions, separate inbox prefixes) against one worker: each moves
// its export and a large file through its own transfer bucket; team-a
// cannot export to or import from a path of the worker's machine, cannot
// read team-b's export object, and cannot import it by name.
func TestTenantTransfersStayApart(t *testing.T) {
	cf := startConfined(t, "team-a", "team-b")
	connect, st := cf.connect, cf.st
	ctx := context.Background()
	storePath := filepath.Join(cf.home, "store.db")

	ncA := connect("agent-team-a", "pw-team-a", "_INBOX_team-a")
	a, _ := client.New(ncA)
	b, _ := client.New(connect("agent-team-b", "pw-team-b", "_INBOX_team-b"))
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ccancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Call(cctx, "team-a", "mine", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(b.Call(cctx, "team-b", "theirs", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(b.Call(cctx, "team-b", "theirs", messages.OpWrite, messages.WriteArgs{Path: "/secret.txt", Content: []byte("team-b's secret")}, nil))

	// A large file through team-a's own bucket works under its permissions.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	obj, err := a.Upload(cctx, "team-a", "mine", bytes.NewReader(big), nil)
	must(err)
	var wr messages.WriteResult
	must(a.Call(client.ViaIntake(cctx), "team-a", "mine", messages.OpWrite, messages.WriteArgs{Path: "/big", ContentObject: obj}, &wr))
	var cat messages.CatResult
	must(a.Call(client.ViaIntake(cctx), "team-a", "mine", messages.OpCat, messages.CatArgs{Path: "/big", Object: true}, &cat))
	if cat.Object == nil {
		t.Fatalf("cat of 16 MiB answered inline")
	}
	var got bytes.Buffer
	must(a.Download(cctx, "team-a", *cat.Object, &got, nil))
	if !bytes.Equal(got.Bytes(), big) {
		t.Fatal("team-a's large file came back different")
	}

	// team-b's export lands in team-b's bucket.
	var trB messages.TransferResult
	must(b.Call(client.ViaIntake(cctx), "team-b", "theirs", messages.OpVaultExport, nil, &trB))
	if trB.Object == nil || trB.Object.Bucket != messages.TransferBucket("team-b") {
		t.Fatalf("team-b's export: %+v", trB.Object)
	}
	// team-a cannot read it: the server refuses team-a's API requests on
	// team-b's bucket.
	jsA, _ := jetstream.New(ncA)
	short, scancel := context.WithTimeout(cctx, 3*time.Second)
	r, err := transfer.Open(short, jsA, trB.Object.Bucket, trB.Object.Name)
	scancel()
	if err == nil {
		var stolen bytes.Buffer
		stolen.ReadFrom(r)
		t.Fatalf("team-a opened team-b's export (%d bytes)", stolen.Len())
	}
	// Nor import it by name: objects are looked up in the caller's bucket.
	var e *messages.Error
	err = a.Call(client.ViaIntake(cctx), "team-a", "theirs", messages.OpVaultImport, messages.VaultTransferArgs{Object: trB.Object.Name}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeNotFound {
		t.Fatalf("team-a importing team-b's object: want NOT_FOUND, got %v", err)
	}
	// Nor name a path of the worker's machine, to write or to read.
	err = a.Call(client.ViaIntake(cctx), "team-a", "mine", messages.OpVaultExport, messages.VaultTransferArgs{File: storePath}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("team-a exporting over the worker's store: want INVALID_ARGUMENT, got %v", err)
	}
	hostExport := filepath.Join(t.TempDir(), "b.avfs")
	if _, err := st.Export(ctx, "team-b", "theirs", hostExport); err != nil {
		t.Fatal(err)
	}
	err = a.Call(client.ViaIntake(cctx), "team-a", "stolen", messages.OpVaultImport, messages.VaultTransferArgs{File: hostExport}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("team-a importing a file of the worker's machine: want INVALID_ARGUMENT, got %v", err)
	}
	var list messages.VaultListResult
	must(a.Call(cctx, "team-a", "", messages.OpVaultList, nil, &list))
	if len(list.Vaults) != 1 || list.Vaults[0].Name != "mine" {
		t.Fatalf("team-a's vaults: %+v", list.Vaults)
	}
	// The store is intact and team-b's data unchanged.
	must(b.Call(cctx, "team-b", "theirs", messages.OpCat, messages.CatArgs{Path: "/secret.txt"}, &cat))
	if cat.Content == nil || *cat.Content != "team-b's secret" {
		t.Fatalf("team-b's file: %+v", cat)
	}
	if _, err := os.Stat(storePath + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an export was started over the store: %v", err)
	}
}
