package embedded

import (
	"net"
	"strconv"
	"testing"
)

// --listen HOST:0 asks for a free port, as net.Listen reads it: not for
// NATS's default 4222, which another server may hold.
func TestListenPortZeroPicksAFreePort(t *testing.T) {
	ns, err := Start(Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	_, p, err := net.SplitHostPort(ns.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if port, _ := strconv.Atoi(p); port == 0 || port == 4222 {
		t.Fatalf("listening on %s, want a port the system picked", ns.Addr())
	}
}
