package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
)

// TestCoreTakesTypedArgsAndReturnsTypedResults: the core serves a Call
// with args by value and returns the op's result type, so a layer around
// it reads a result without decoding anything.
func TestCoreTakesTypedArgsAndReturnsTypedResults(t *testing.T) {
	h := newHandler(t)
	ctx := context.Background()
	res, err := h.Serve(ctx, handler.Call{Request: messages.Request{Op: messages.OpVaultCreate, Vault: "v"}, Args: messages.VaultCreateArgs{}})
	if err != nil {
		t.Fatal(err)
	}
	vr, ok := res.(messages.VaultResult)
	if !ok || vr.Vault.Name != "v" || vr.Vault.Namespace != "default" {
		t.Fatalf("vault.create result: got %#v, want a messages.VaultResult for default/v", res)
	}
	res, err = h.Serve(ctx, handler.Call{Request: messages.Request{Op: messages.OpVaultFork, Vault: "v"}, Args: messages.VaultForkArgs{Target: "f"}})
	if fr, ok := res.(messages.ForkResult); err != nil || !ok || fr.Vault.Name != "f" {
		t.Fatalf("vault.fork result: got %#v, %v, want a messages.ForkResult for f", res, err)
	}
	// nil args are the type's zero value; args of another type are refused.
	if _, err := h.Serve(ctx, handler.Call{Request: messages.Request{Op: messages.OpVaultInfo, Vault: "v"}}); err != nil {
		t.Fatalf("vault.info with nil args: %v", err)
	}
	_, err = h.Serve(ctx, handler.Call{Request: messages.Request{Op: messages.OpVaultFork, Vault: "v"}, Args: messages.WriteArgs{}})
	var me *messages.Error
	if !errors.As(err, &me) || me.Code != messages.CodeInvalidArgument {
		t.Fatalf("fork with write args: got %v, want INVALID_ARGUMENT", err)
	}
}

// TestReplyDecodesOnceAndWrappersSeeTypes: the edge decodes the args
// before any wrapper runs, a wrapper sees the typed args and result and
// may replace the result, and the edge encodes what the wrapper returned.
func TestReplyDecodesOnceAndWrappersSeeTypes(t *testing.T) {
	h := newHandler(t)
	ctx := context.Background()
	var sawArgs any
	wrap := handler.CoreFunc(func(ctx context.Context, c handler.Call) (any, error) {
		sawArgs = c.Args
		res, err := h.Serve(ctx, c)
		if r, ok := res.(messages.VaultResult); ok {
			r.Vault.Worker = "elsewhere"
			res = r
		}
		return res, err
	})
	files := int64(7)
	args, _ := json.Marshal(messages.VaultCreateArgs{Quota: messages.QuotaArgs{MaxFiles: &files}})
	rep := h.Reply(ctx, messages.Request{Op: messages.OpVaultCreate, Vault: "w", Args: args}, h.Wrap(wrap))
	if rep.Error != nil {
		t.Fatal(rep.Error)
	}
	if a, ok := sawArgs.(messages.VaultCreateArgs); !ok || a.Quota.MaxFiles == nil || *a.Quota.MaxFiles != 7 {
		t.Fatalf("wrapper saw args %#v, want messages.VaultCreateArgs with max_files 7", sawArgs)
	}
	var vr messages.VaultResult
	if err := json.Unmarshal(rep.Result, &vr); err != nil || vr.Vault.Worker != "elsewhere" {
		t.Fatalf("reply %s (%v), want the wrapper's result", rep.Result, err)
	}
	// Bad args never reach the core: the edge answers.
	called := false
	rep = h.Reply(ctx, messages.Request{Op: messages.OpVaultCreate, Vault: "x", Args: json.RawMessage(`{"nope":1}`)},
		handler.CoreFunc(func(context.Context, handler.Call) (any, error) { called = true; return nil, nil }))
	if code(rep) != messages.CodeInvalidArgument || called {
		t.Fatalf("bad args: code %q, core called %v; want INVALID_ARGUMENT before the core", code(rep), called)
	}
	// A bad vault name is reported before bad args, as before the split.
	rep = h.Reply(ctx, messages.Request{Op: messages.OpVaultCreate, Vault: "../x", Args: json.RawMessage(`{"nope":1}`)}, h)
	if rep.Error == nil || strings.Contains(rep.Error.Message, "bad args") {
		t.Fatalf("bad vault and bad args: got %+v, want the vault name refused", rep.Error)
	}
}
