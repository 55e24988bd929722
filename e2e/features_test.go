package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/avfs/avfs/messages"
)

// TestHistoryAndSearchThroughFleet: file versions made by the API and by
// an exec (through the mount) are listed, diffed and searched through the
// fleet, with the same ops the CLI uses in-process.
func TestHistoryAndSearchThroughFleet(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	must := func(op messages.Op, args, out any) {
		t.Helper()
		if err := c.Call(ctx, "default", "h", op, args, out); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	must(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
	must(messages.OpWrite, messages.WriteArgs{Path: "/notes.txt", Content: []byte("alpha\n")}, nil)
	must(messages.OpWrite, messages.WriteArgs{Path: "/notes.txt", Content: []byte("alpha\nbeta\n")}, nil)
	env, err := c.Exec(ctx, "default", "h", messages.ExecArgs{Shell: "echo gamma >> notes.txt"})
	if err != nil || env.Status != messages.StatusCompleted {
		t.Fatalf("exec: %v %+v", err, env)
	}
	var log messages.HistoryLogResult
	must(messages.OpHistoryLog, messages.HistoryLogArgs{Path: "/notes.txt"}, &log)
	if n := len(log.Versions); n != 3 || log.Versions[2].Size != int64(len("alpha\nbeta\ngamma\n")) {
		t.Fatalf("log through the fleet: %+v, want 3 versions, the last one written by exec", log.Versions)
	}
	var d messages.HistoryDiffResult
	must(messages.OpHistoryDiff, messages.HistoryDiffArgs{Path: "/notes.txt", V1: 1, V2: 3}, &d)
	if !strings.Contains(d.Diff, "+beta\n+gamma\n") {
		t.Fatalf("diff v1 v3: %q", d.Diff)
	}
	var s messages.SearchResult
	must(messages.OpSearch, messages.SearchArgs{Query: "gamma"}, &s)
	if len(s.Hits) != 1 || s.Hits[0].Path != "/notes.txt" {
		t.Fatalf("search gamma: %+v", s.Hits)
	}
	// A worker never reads a path of its own machine for a request.
	err = c.Call(ctx, "default", "h", messages.OpImportDir, messages.HostDirArgs{HostDir: t.TempDir()}, nil)
	if me, ok := err.(*messages.Error); !ok || me.Code != messages.CodeInvalidArgument {
		t.Fatalf("file.import_dir through the fleet: %v, want INVALID_ARGUMENT", err)
	}
	var g messages.GrepResult
	must(messages.OpGrep, messages.GrepArgs{Pattern: "^b"}, &g)
	if len(g.Matches) != 1 || g.Matches[0].Line != 2 {
		t.Fatalf("grep ^b: %+v", g.Matches)
	}
}
