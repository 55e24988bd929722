package mount

import (
	"runtime"
	"testing"

	"github.com/avfs/avfs/vault"
)

// A served mount runs its process with Ps for the reads go-fuse keeps
// blocked on /dev/fuse, and gives them back when it is closed or
// unmounted from outside: a worker that mounts and unmounts vault after
// vault must not ratchet GOMAXPROCS up.
func TestMountsReserveProcsWhileServed(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	a := mountVault(t, testVault(t, vault.Quota{}), Options{})
	if got := runtime.GOMAXPROCS(0); got != base+readerProcs {
		t.Fatalf("GOMAXPROCS %d with one mount, want %d", got, base+readerProcs)
	}
	b := mountVault(t, testVault(t, vault.Quota{}), Options{})
	c := mountVault(t, testVault(t, vault.Quota{}), Options{})
	if got, want := runtime.GOMAXPROCS(0), base+min(3*readerProcs, maxReaderProcs); got != want {
		t.Fatalf("GOMAXPROCS %d with three mounts, want %d", got, want)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Unmounted from outside: the reservation ends with the server.
	if err := c.server.Unmount(); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("GOMAXPROCS %d after every mount went, want %d", got, base)
	}
}
