package handler_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func newHandler(t testing.TB) *handler.Handler {
	t.Helper()
	st, err := vault.Open(context.Background(), filepath.Join(t.TempDir(), "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return handler.New(st, handler.Options{})
}

func code(rep messages.Reply) messages.Code {
	if rep.Error == nil {
		return ""
	}
	return rep.Error.Code
}

// TestWireRefusesTextDecodingWouldChange: JSON that carries a name as
// raw non-UTF-8 bytes or as an unpaired surrogate escape would decode to
// U+FFFD, folding names; the handler refuses it and writes nothing.
func TestWireRefusesTextDecodingWouldChange(t *testing.T) {
	ctx := context.Background()
	h := newHandler(t)
	if rep := h.Handle(ctx, messages.Request{Op: messages.OpVaultCreate, Vault: "v"}); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	for _, args := range []string{
		`{"path":"/u` + "\xff" + `","content":"b25l"}`,
		`{"path":"/u\udcff","content":"b25l"}`,
		`{"path":"/u\ud800","content":"b25l"}`,
	} {
		if c := code(h.Handle(ctx, messages.Request{Op: messages.OpWrite, Vault: "v", Args: []byte(args)})); c != messages.CodeInvalidPath {
			t.Errorf("write %s: %q, want INVALID_PATH", args, c)
		}
	}
	rep := h.Handle(ctx, messages.Request{Op: messages.OpLs, Vault: "v", Args: []byte(`{"path":"/"}`)})
	if rep.Error != nil || string(rep.Result) != `{"path":"/","entries":[]}` {
		t.Fatalf("vault after refused writes: %s %v", rep.Result, rep.Error)
	}
}

// TestRequestIDReuse: an id is a request of one vault; reused with other
// arguments it is CONFLICT, in another vault or namespace it is new.
func TestRequestIDReuse(t *testing.T) {
	ctx := context.Background()
	h := newHandler(t)
	for _, ns := range []string{"team-a", "team-b"} {
		if rep := h.Handle(ctx, messages.Request{Op: messages.OpVaultCreate, Namespace: ns, Vault: "v"}); rep.Error != nil {
			t.Fatal(rep.Error)
		}
	}
	write := func(ns, args string) messages.Reply {
		return h.Handle(ctx, messages.Request{Op: messages.OpWrite, Namespace: ns, Vault: "v", RequestID: "job-1", Args: []byte(args)})
	}
	if rep := write("team-a", `{"path":"/f","content":"YQ=="}`); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	// The same arguments spelled differently are the same request.
	if rep := write("team-a", `{ "content": "YQ==", "path": "/f" }`); rep.Error != nil {
		t.Fatalf("replay: %v", rep.Error)
	}
	if c := code(write("team-a", `{"path":"/f","content":"Yg=="}`)); c != messages.CodeConflict {
		t.Fatalf("same id, other content: %q, want CONFLICT", c)
	}
	if rep := write("team-b", `{"path":"/f","content":"Yg=="}`); rep.Error != nil {
		t.Fatalf("team-b under team-a's id: %v", rep.Error)
	}
	cat := func(ns string) string {
		rep := h.Handle(ctx, messages.Request{Op: messages.OpCat, Namespace: ns, Vault: "v", Args: []byte(`{"path":"/f"}`)})
		return string(rep.Result)
	}
	if a, b := cat("team-a"), cat("team-b"); a != `{"path":"/f","size":1,"content":"a"}` || b != `{"path":"/f","size":1,"content":"b"}` {
		t.Fatalf("team-a reads %s, team-b %s", a, b)
	}
}

// TestVaultDeleteIfExpired: the expiry sweep's delete (if_expired) is
// CONFLICT and deletes nothing when the vault has no expiry (any more):
// the fleet's sweep sends it behind the user's requests, which may have
// cleared the TTL or made the name again.
func TestVaultDeleteIfExpired(t *testing.T) {
	ctx := context.Background()
	h := newHandler(t)
	if rep := h.Handle(ctx, messages.Request{Op: messages.OpVaultCreate, Namespace: "default", Vault: "v"}); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	del := messages.Request{Op: messages.OpVaultDelete, Namespace: "default", Vault: "v", Args: []byte(`{"if_expired":true}`), RequestID: "expire-1"}
	if c := code(h.Handle(ctx, del)); c != messages.CodeConflict {
		t.Fatalf("delete if expired of a vault without expiry: %q, want CONFLICT", c)
	}
	if rep := h.Handle(ctx, messages.Request{Op: messages.OpVaultInfo, Namespace: "default", Vault: "v"}); rep.Error != nil {
		t.Fatalf("vault gone after a refused delete: %v", rep.Error)
	}
	del.Args, del.RequestID = nil, "plain"
	if rep := h.Handle(ctx, del); rep.Error != nil {
		t.Fatalf("plain delete: %v", rep.Error)
	}
}
