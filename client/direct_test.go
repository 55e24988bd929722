package client

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/messages"
)

func ownerHeader(w, epoch string) nats.Header {
	h := nats.Header{}
	h.Set(messages.HeaderWorker, w)
	if epoch != "" {
		h.Set(messages.HeaderOwnerEpoch, epoch)
	}
	return h
}

func TestRoutes(t *testing.T) {
	c := &Client{}
	write := messages.Request{Op: messages.OpWrite, Namespace: "ns", Vault: "v"}
	want := func(w string) {
		t.Helper()
		got, ok := c.directTo(write)
		if got != w || ok != (w != "") {
			t.Fatalf("route: got %q %v, want %q", got, ok, w)
		}
	}
	want("")
	c.learn(write, ownerHeader("w1", "")) // answered, but not as the owner
	want("")
	c.learn(write, ownerHeader("w1", "2"))
	want("w1")
	if _, ok := c.directTo(messages.Request{Op: messages.OpExec, Namespace: "ns", Vault: "v"}); ok {
		t.Fatal("exec.run would go direct")
	}
	c.learn(write, ownerHeader("w0", "1")) // a late reply from a replaced owner
	want("w1")
	c.learn(write, ownerHeader("w2", "3"))
	want("w2")
	c.learn(messages.Request{Op: messages.OpVaultDelete, Namespace: "ns", Vault: "v"}, ownerHeader("w2", "3"))
	want("")
	c.learn(write, ownerHeader("w2", "1"))
	want("w2")
	c.forget("ns", "v", true) // after a timeout, replies teach nothing for a while
	c.learn(write, ownerHeader("w2", "1"))
	want("")
	c.DisableDirect = true
	c.forget("ns", "v", false)
	c.learn(write, ownerHeader("w2", "1"))
	want("")
}
