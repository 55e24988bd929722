package client

import (
	"context"
	"time"

	"github.com/avfs/avfs/messages"
)

// Background runs (docs/protocol.md, "Background runs"): StartRun starts
// a command and returns at once; the worker that owns the vault runs it
// and keeps its log and envelope after it ends.

// StartRun starts args as a background run in ns/vault.
func (c *Client) StartRun(ctx context.Context, ns, vault string, args messages.ExecArgs) (messages.RunInfo, error) {
	var r messages.RunResult
	err := c.Call(ctx, ns, vault, messages.OpRunStart, args, &r)
	return r.Run, err
}

// RunStatus returns a run's state, and its envelope once it is done.
func (c *Client) RunStatus(ctx context.Context, ns, vault, id string) (messages.RunInfo, error) {
	var r messages.RunResult
	err := c.Call(ctx, ns, vault, messages.OpRunStatus, messages.RunArgs{ID: id}, &r)
	return r.Run, err
}

// RunLogs returns the run's output after cursor since (0: from the
// start); pass the result's Next to read on.
func (c *Client) RunLogs(ctx context.Context, ns, vault, id string, since int64) (messages.RunLogsResult, error) {
	var r messages.RunLogsResult
	err := c.Call(ctx, ns, vault, messages.OpRunLogs, messages.RunLogsArgs{ID: id, Since: since}, &r)
	return r, err
}

// KillRun stops a run (SIGTERM to its process group, SIGKILL after the
// grace period) and returns it once it has ended.
func (c *Client) KillRun(ctx context.Context, ns, vault, id string) (messages.RunInfo, error) {
	var r messages.RunResult
	err := c.Call(ctx, ns, vault, messages.OpRunKill, messages.RunArgs{ID: id}, &r)
	return r.Run, err
}

// ListRuns lists a vault's runs, newest first.
func (c *Client) ListRuns(ctx context.Context, ns, vault string) ([]messages.RunInfo, error) {
	var r messages.RunListResult
	err := c.Call(ctx, ns, vault, messages.OpRunList, nil, &r)
	return r.Runs, err
}

// WaitRun polls a run every poll (default 500 ms) until it is no longer
// running or ctx ends, and returns its last state. Waiting is the
// caller's: a worker never holds a vault's request queue for it.
func (c *Client) WaitRun(ctx context.Context, ns, vault, id string, poll time.Duration) (messages.RunInfo, error) {
	return WaitRun(ctx, c, ns, vault, id, poll)
}

// WaitRun is Client.WaitRun through any Doer (the CLI's in-process
// handler too).
func WaitRun(ctx context.Context, d Doer, ns, vault, id string, poll time.Duration) (messages.RunInfo, error) {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		var r messages.RunResult
		if err := call(ctx, d, messages.Request{Op: messages.OpRunStatus, Namespace: ns, Vault: vault}, messages.RunArgs{ID: id}, &r); err != nil {
			return r.Run, err
		}
		if r.Run.State != messages.RunRunning {
			return r.Run, nil
		}
		select {
		case <-ctx.Done():
			return r.Run, ctx.Err()
		case <-t.C:
		}
	}
}
