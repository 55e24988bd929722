package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

func TestRunLimitIdsAndLostRuns(t *testing.T) {
	f := newFixture(t, Config{RunsDir: t.TempDir(), MaxRuns: 2})
	f.do(messages.OpVaultCreate, "a", nil, nil)
	f.do(messages.OpVaultCreate, "b", nil, nil)
	long := messages.ExecArgs{Shell: "echo started; sleep 30"}
	// Sent twice with one request id, run.start starts one run.
	start := func(vaultName, id string) (messages.RunInfo, *messages.Error) {
		b, _ := json.Marshal(long)
		rep := f.h.Handle(context.Background(), messages.Request{Op: messages.OpRunStart, Namespace: "default", Vault: vaultName, RequestID: id, Args: b})
		var r messages.RunResult
		if rep.Error == nil {
			json.Unmarshal(rep.Result, &r)
		}
		return r.Run, rep.Error
	}
	first, err := start("a", "r1")
	if err != nil || first.State != messages.RunRunning {
		t.Fatalf("start: %+v %v", first, err)
	}
	if again, err := start("a", "r1"); err != nil || again.ID != first.ID {
		t.Fatalf("retried start: %+v %v, want run %s", again, err, first.ID)
	}
	poll.Until(t, 30*time.Second, "the first run started", func() (bool, error) {
		var l messages.RunLogsResult
		f.do(messages.OpRunLogs, "a", messages.RunLogsArgs{ID: first.ID}, &l)
		return len(l.Chunks) > 0 && string(l.Chunks[0].Data) == "started\n", fmt.Errorf("logs %+v", l)
	})
	// The second run of a vault waits for its turn (commands in a vault
	// run one at a time); killed while it waits, it never starts.
	queued, err := start("a", "r2")
	if err != nil {
		t.Fatalf("second run in a: %v", err)
	}
	if _, err := start("a", "r3"); err == nil || err.Code != messages.CodeQuotaExceeded || err.Details["max"] != 2 {
		t.Fatalf("third run in a: %v, want QUOTA_EXCEEDED max 2", err)
	}
	var dropped messages.RunResult
	f.do(messages.OpRunKill, "a", messages.RunArgs{ID: queued.ID}, &dropped)
	if e := dropped.Run.Envelope; e == nil || e.Status != messages.StatusCanceled || e.ExitCode != nil || e.Signal != nil {
		t.Fatalf("queued run killed: %+v", dropped.Run)
	}
	if other, err := start("b", "r5"); err != nil {
		t.Fatalf("run in b: %v (the limit is per vault)", err)
	} else {
		f.do(messages.OpRunKill, "b", messages.RunArgs{ID: other.ID}, nil)
	}
	f.do(messages.OpRunStatus, "a", messages.RunArgs{ID: "run-nope"}, nil, messages.CodeInvalidArgument)
	f.do(messages.OpRunStatus, "a", messages.RunArgs{ID: "run-000000000000"}, nil, messages.CodeNotFound)
	f.do(messages.OpRunStatus, "b", messages.RunArgs{ID: first.ID}, nil, messages.CodeNotFound)

	// Another process reading the same records sees the run it does not
	// run as lost, not as running forever.
	other := newRuns(f.r, f.r.runs.dir, 1)
	if info, err := other.record("default", "a", first.ID); err != nil || info.State != messages.RunLost || info.Envelope != nil {
		t.Fatalf("record read elsewhere: %+v %v, want lost", info, err)
	}
	var killed messages.RunResult
	f.do(messages.OpRunKill, "a", messages.RunArgs{ID: first.ID}, &killed)
	if e := killed.Run.Envelope; killed.Run.State != messages.RunDone || e == nil || e.Status != messages.StatusCanceled || e.Signal == nil {
		t.Fatalf("killed: %+v", killed.Run)
	}
	last, err := start("a", "r4")
	if err != nil {
		t.Fatalf("start after the kill: %v", err)
	}
	// A process that stops ends its runs, and they record their end.
	f.h.Stop()
	var st messages.RunResult
	f.do(messages.OpRunStatus, "a", messages.RunArgs{ID: last.ID}, &st)
	if e := st.Run.Envelope; st.Run.State != messages.RunDone || e == nil || e.Status != messages.StatusCanceled {
		t.Fatalf("run after Stop: %+v", st.Run)
	}
}

func TestRunRecordsArePrunedOldestFirst(t *testing.T) {
	dir := t.TempDir()
	rs := newRuns(nil, dir, 1)
	base := time.Now().Add(-time.Hour)
	id := func(i int) string { return fmt.Sprintf("run-%012x", i) }
	for i := range runListMax + 5 {
		for _, ext := range []string{".json", ".log"} {
			p := filepath.Join(dir, id(i)+ext)
			if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(p, base.Add(time.Duration(i)*time.Second), base.Add(time.Duration(i)*time.Second))
		}
	}
	rs.live[id(0)] = &run{} // a live run is never pruned, however old
	rs.prune(dir)
	left, _ := filepath.Glob(filepath.Join(dir, "run-*.json"))
	logs, _ := filepath.Glob(filepath.Join(dir, "run-*.log"))
	if len(left) != runListMax-1 || len(logs) != runListMax-1 {
		t.Fatalf("%d records and %d logs left, want %d (room for the next run)", len(left), len(logs), runListMax-1)
	}
	for i := 1; i <= 6; i++ { // 105 records, 1 live: the 6 oldest ended ones go
		if _, err := os.Stat(filepath.Join(dir, id(i)+".json")); err == nil {
			t.Fatalf("old ended run %s kept", id(i))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, id(0)+".json")); err != nil {
		t.Fatalf("live run pruned: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, id(7)+".json")); err != nil {
		t.Fatalf("a recent run pruned: %v", err)
	}
}

// TestRunSurvivesItsAutoCheckpointPruned: retention applied while a
// command runs (vault set, maintain) may prune the auto-checkpoint taken
// before it; the run still reports what it changed.
func TestRunSurvivesItsAutoCheckpointPruned(t *testing.T) {
	f := newFixture(t, Config{RunsDir: t.TempDir(), MaxRuns: 2})
	f.do(messages.OpVaultCreate, "p", nil, nil)
	var started messages.RunResult
	f.do(messages.OpRunStart, "p", messages.ExecArgs{Checkpoint: "always",
		Shell: "while [ ! -f go ]; do sleep 0.05; done; echo done > out.txt"}, &started)
	if started.Run.State != messages.RunRunning {
		t.Fatalf("start: %+v", started.Run)
	}
	// Wait for the auto-checkpoint, then make retention drop it.
	poll.Until(t, 30*time.Second, "the run's auto-checkpoint", func() (bool, error) {
		var l messages.CheckpointListResult
		f.do(messages.OpCheckpointList, "p", nil, &l)
		return len(l.Checkpoints) == 1, nil
	})
	f.do(messages.OpVaultSet, "p", messages.VaultSetArgs{Key: "auto_max_age", Value: "1ns"}, nil)
	var l messages.CheckpointListResult
	f.do(messages.OpCheckpointList, "p", nil, &l)
	if len(l.Checkpoints) != 0 {
		t.Fatalf("checkpoints after auto_max_age 1ns: %+v", l.Checkpoints)
	}
	f.do(messages.OpWrite, "p", messages.WriteArgs{Path: "/go", Content: []byte("1")}, nil)
	var st messages.RunResult
	poll.Until(t, 60*time.Second, "the run done", func() (bool, error) {
		f.do(messages.OpRunStatus, "p", messages.RunArgs{ID: started.Run.ID}, &st)
		return st.Run.State == messages.RunDone && st.Run.Envelope != nil, fmt.Errorf("run %+v", st.Run)
	})
	e := st.Run.Envelope
	if e.Status != messages.StatusCompleted || e.Changes == nil {
		t.Fatalf("run envelope %+v, want completed with changes", e)
	}
	found := false
	for _, c := range e.Changes.Added {
		found = found || c.Path == "/out.txt"
	}
	if !found {
		t.Fatalf("changes %+v, want /out.txt added", e.Changes)
	}
}
