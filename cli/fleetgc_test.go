package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
)

// TestFleetGCThroughServe runs `avfs fleet gc` as an operator would
// against a running serve: a dry run counts a deleted vault's chunks
// without deleting them, a sweep deletes them, the live vault still
// reads, and its content survives the next push.
func TestFleetGCThroughServe(t *testing.T) {
	e := newEnv(t)
	startServe(t, e, "w-gc")
	e.ok("vault", "create", "keep", "--json")
	e.ok("vault", "create", "drop", "--json")
	e.ok("write", "/k.txt", "kept", "--vault", "keep", "--json")
	e.ok("checkpoint", "save", "k1", "--vault", "keep", "--json")
	e.ok("write", "/d.bin", strings.Repeat("garbage ", 20000)+"/"+strings.Repeat("more ", 20000), "--vault", "drop", "--json")
	e.ok("checkpoint", "save", "d1", "--vault", "drop", "--json")
	// The checkpoint's push runs after its reply: wait for its chunks.
	poll.Until(t, 30*time.Second, "drop pushed", func() (bool, error) {
		m := e.ok("fleet", "gc", "--dry-run", "--json")
		return m["chunks"].(float64) >= 3 && m["manifests"].(float64) >= 2, fmt.Errorf("dry run %v", m)
	})
	e.ok("vault", "delete", "drop", "--yes", "--json")
	num := func(m map[string]any, k string) int {
		t.Helper()
		f, ok := m[k].(float64)
		if !ok {
			t.Fatalf("%s missing from %v", k, m)
		}
		return int(f)
	}
	var dry map[string]any
	poll.Until(t, 30*time.Second, "the deleted vault's chunks counted", func() (bool, error) {
		dry = e.ok("fleet", "gc", "--dry-run", "--json")
		return num(dry, "unreferenced") > 0, fmt.Errorf("dry run %v", dry)
	})
	if dry["dry_run"] != true || num(dry, "deleted") != 0 {
		t.Fatalf("dry run: %v", dry)
	}
	res := e.ok("fleet", "gc", "--settle", "1s", "--json")
	if num(res, "deleted") < num(dry, "unreferenced") || num(res, "generation") != 1 {
		t.Fatalf("sweep: %v, after dry run %v", res, dry)
	}
	if again := e.ok("fleet", "gc", "--dry-run", "--json"); num(again, "unreferenced") != 0 {
		t.Fatalf("after the sweep, a dry run still finds %v", again)
	}
	if got, _ := e.ok("cat", "/k.txt", "--vault", "keep", "--json")["content"].(string); got != "kept" {
		t.Fatalf("/k.txt = %q", got)
	}
	e.fails(2, "INVALID_ARGUMENT", "fleet", "gc", "--settle", "-1s", "--json")
}
