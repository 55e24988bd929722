package runner

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// Background runs (docs/protocol.md, "Background runs"). run.start
// answers at once with a run id; the command then runs as an exec.run in
// a goroutine of this process, not in the vault's request queue, so the
// vault keeps serving other requests (run.logs, run.status) meanwhile.
// Each run keeps two files under <home>/runs/<ns>/<vault>/: <id>.log, its
// output as one JSON OutputChunk per line, and <id>.json, its RunInfo,
// written when it starts and again, with the envelope, when it ends. A
// run's cursor is a byte offset in its log at a line boundary: stable,
// since the log is only appended to. The records outlive the process; a
// record still "running" that this process does not run belongs to a
// process that stopped, and reads as "lost".

// Defaults of the run limits.
const (
	DefaultMaxRuns = 4       // concurrent runs per vault
	runLogMax      = 1 << 30 // bytes of log kept per run; the envelope keeps head and tail
	runLogPage     = 1 << 20 // default and largest run.logs answer, in log bytes
	runKillWait    = 30 * time.Second
	runListMax     = 100 // runs listed, and ended runs kept, per vault
)

var runIDPattern = regexp.MustCompile(`^run-[0-9a-f]{12}$`)

// Close ends the Runner's background runs (each records its envelope,
// status canceled) and waits for them. Call it before closing the mounts.
func (r *Runner) Close() {
	if r.runs != nil {
		r.runs.close()
	}
	r.sbox.close()
}

// runs owns the background runs of one Runner. Lock order: runs.mu,
// then a runLog's mu.
type runs struct {
	r   *Runner
	dir string
	max int
	// ctx ends every run when the process shuts down (close).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex // guards live and the records on disk
	live map[string]*run
	h    *handler.Handler // told when a run ended: it changed the vault
}

// run is a run this process is running.
type run struct {
	info   messages.RunInfo // guarded by runs.mu
	log    *runLog
	cancel context.CancelFunc
	done   chan struct{}
}

func newRuns(r *Runner, dir string, max int) *runs {
	if max <= 0 {
		max = DefaultMaxRuns
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &runs{r: r, dir: dir, max: max, ctx: ctx, cancel: cancel, live: map[string]*run{}}
}

// close cancels every run and waits until each has recorded its end.
// Under mu, so that no run starts once it began (see start).
func (rs *runs) close() {
	rs.mu.Lock()
	rs.cancel()
	rs.mu.Unlock()
	rs.wg.Wait()
}

func (rs *runs) register(h *handler.Handler) {
	rs.h = h
	h.OnStop(rs.close)
	handler.Register(h, messages.OpRunStart, rs.start)
	handler.Register(h, messages.OpRunStatus, func(ctx context.Context, req messages.Request, a messages.RunArgs) (any, error) {
		info, err := rs.status(req, a.ID)
		return messages.RunResult{Run: info}, err
	})
	handler.Register(h, messages.OpRunLogs, rs.logs)
	handler.Register(h, messages.OpRunKill, rs.kill)
	handler.Register(h, messages.OpRunList, rs.list)
}

// runID is the id of the run a request starts: derived from the request
// id, so that a redelivered run.start finds the run it started.
func runID(req messages.Request) string {
	if req.RequestID == "" {
		return newID("run-")
	}
	sum := sha256.Sum256([]byte(req.Namespace + "/" + req.Vault + "/" + req.RequestID))
	return "run-" + hex.EncodeToString(sum[:6])
}

func (rs *runs) vaultDir(ns, vault string) string { return filepath.Join(rs.dir, ns, vault) }

func (rs *runs) start(ctx context.Context, req messages.Request, a messages.ExecArgs) (any, error) {
	id := runID(req)
	if _, err := rs.r.store.Vault(req.Namespace, req.Vault).Info(ctx); err != nil {
		return nil, err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if info, err := rs.lookup(req, id); err == nil {
		return messages.RunResult{Run: info}, nil // a retry of the same run.start
	}
	if rs.ctx.Err() != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "worker %s is stopping: start the run again", rs.r.cfg.Worker)
	}
	n := 0
	for _, x := range rs.live {
		if x.info.Namespace == req.Namespace && x.info.Vault == req.Vault {
			n++
		}
	}
	if n >= rs.max {
		e := messages.Errorf(messages.CodeQuotaExceeded, "vault %q already has %d runs going (the limit, exec.max_runs): wait for one (avfs run list) or kill one (avfs run kill ID)", req.Vault, n)
		e.Details = map[string]any{"limit": "max_runs", "max": rs.max, "current": n}
		return nil, e
	}
	dir := rs.vaultDir(req.Namespace, req.Vault)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("runs directory: %w", err)
	}
	rs.prune(dir)
	f, err := os.OpenFile(filepath.Join(dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("run log: %w", err)
	}
	info := messages.RunInfo{ID: id, Namespace: req.Namespace, Vault: req.Vault, Worker: rs.r.cfg.Worker, State: messages.RunRunning,
		Command: a.Argv, StartedAt: rs.r.now().UTC().Format(time.RFC3339Nano)}
	if a.Shell != "" {
		info.Shell = &a.Shell
	}
	if err := writeRecord(dir, info); err != nil {
		f.Close()
		return nil, err
	}
	// The run keeps the request's values (trace, attempt) but not its
	// deadline or cancellation: it ends by itself, by run.kill, or when
	// this process stops.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(rs.ctx, cancel)
	x := &run{info: info, log: &runLog{f: f}, cancel: cancel, done: make(chan struct{})}
	rs.live[id] = x
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer stop()
		defer cancel()
		// The exec's request id is the run id: its envelope and audit
		// events name the run, and its request-log entry is the run's.
		env, err := rs.r.exec(WithOutput(rctx, x.log.write), messages.Request{Op: messages.OpExec, Namespace: req.Namespace,
			Vault: req.Vault, RequestID: id, Actor: req.Actor}, a, false)
		rs.finish(x, env, err)
	}()
	return messages.RunResult{Run: x.snapshot()}, nil
}

// prune removes the oldest ended runs of a vault directory beyond the
// runListMax most recent, so that records and logs do not pile up. Call
// it with runs.mu held.
func (rs *runs) prune(dir string) {
	paths, err := filepath.Glob(filepath.Join(dir, "run-*.json"))
	if err != nil || len(paths) < runListMax {
		return
	}
	type rec struct {
		id  string
		mod time.Time
	}
	var recs []rec
	for _, p := range paths {
		id := strings.TrimSuffix(filepath.Base(p), ".json")
		if st, err := os.Stat(p); err == nil && rs.live[id] == nil {
			recs = append(recs, rec{id, st.ModTime()})
		}
	}
	slices.SortFunc(recs, func(a, b rec) int { return a.mod.Compare(b.mod) })
	// Room for the run about to start.
	for _, r := range recs[:min(len(recs), len(paths)-runListMax+1)] {
		os.Remove(filepath.Join(dir, r.id+".log"))
		os.Remove(filepath.Join(dir, r.id+".json"))
	}
}

// finish records a run's end: its envelope, or the error that kept the
// command from running.
func (rs *runs) finish(x *run, env messages.Envelope, err error) {
	x.log.close()
	if env.Changes != nil && rs.h != nil {
		rs.h.Changed(messages.OpExec, x.info.Namespace, x.info.Vault)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	info := x.snapshot()
	info.State = messages.RunDone
	end := rs.r.now().UTC().Format(time.RFC3339Nano)
	info.FinishedAt = &end
	if err != nil && errors.Is(err, context.Canceled) && env.Status == "" {
		// Killed while it waited for its turn in the vault: it never
		// started, which its envelope says as a canceled run does.
		env.Status, err = messages.StatusCanceled, nil
	}
	if env.Status != "" {
		info.Envelope = &env
	}
	if err != nil {
		info.Error = handler.ToError(err)
	}
	if werr := writeRecord(rs.vaultDir(info.Namespace, info.Vault), info); werr != nil {
		rs.r.log.Warn("record run end", "run", info.ID, telemetry.LogKeyErr, werr)
	}
	x.info = info
	delete(rs.live, info.ID)
	close(x.done)
}

// snapshot is the run's info with its log's current size. Call it with
// runs.mu held.
func (x *run) snapshot() messages.RunInfo {
	info := x.info
	info.LogBytes, info.LogTruncated = x.log.state()
	return info
}

// lookup finds run id of req's vault, live or recorded. Call it with
// runs.mu held.
func (rs *runs) lookup(req messages.Request, id string) (messages.RunInfo, error) {
	if !runIDPattern.MatchString(id) {
		return messages.RunInfo{}, messages.Errorf(messages.CodeInvalidArgument, "run id %q: want run- and 12 hex digits, as exec --detach printed it", id)
	}
	if x, ok := rs.live[id]; ok && x.info.Namespace == req.Namespace && x.info.Vault == req.Vault {
		return x.snapshot(), nil
	}
	return rs.record(req.Namespace, req.Vault, id)
}

// record reads a run's record from disk; one left "running" by another
// process is lost.
func (rs *runs) record(ns, vault, id string) (messages.RunInfo, error) {
	var info messages.RunInfo
	b, err := os.ReadFile(filepath.Join(rs.vaultDir(ns, vault), id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return info, messages.Errorf(messages.CodeNotFound, "run %s not found in vault %q (avfs run list shows its runs)", id, vault)
	}
	if err != nil {
		return info, fmt.Errorf("run record: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("run record %s: %w", id, err)
	}
	if info.State == messages.RunRunning {
		info.State = messages.RunLost
	}
	if st, err := os.Stat(filepath.Join(rs.vaultDir(ns, vault), id+".log")); err == nil {
		info.LogBytes = st.Size()
	}
	return info, nil
}

func (rs *runs) status(req messages.Request, id string) (messages.RunInfo, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.lookup(req, id)
}

// kill stops a live run (SIGTERM to its process group, SIGKILL after the
// grace period) and answers once it has ended; a run that already ended
// is answered as it is.
func (rs *runs) kill(ctx context.Context, req messages.Request, a messages.RunArgs) (any, error) {
	rs.mu.Lock()
	x, live := rs.live[a.ID]
	if live && (x.info.Namespace != req.Namespace || x.info.Vault != req.Vault) {
		live = false
	}
	rs.mu.Unlock()
	if live {
		x.cancel()
		wait, cancel := context.WithTimeout(ctx, runKillWait)
		defer cancel()
		select {
		case <-x.done:
		case <-wait.Done():
			return nil, messages.Errorf(messages.CodeTimeout, "run %s did not end within %s of being killed", a.ID, runKillWait)
		}
	}
	info, err := rs.status(req, a.ID)
	return messages.RunResult{Run: info}, err
}

// stopVault kills the live runs of ns/vault and waits until they ended.
func (rs *runs) stopVault(ns, vault string) {
	rs.mu.Lock()
	var stopping []*run
	for _, x := range rs.live {
		if x.info.Namespace == ns && x.info.Vault == vault {
			x.cancel()
			stopping = append(stopping, x)
		}
	}
	rs.mu.Unlock()
	for _, x := range stopping {
		<-x.done
	}
}

func (rs *runs) list(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	paths, err := filepath.Glob(filepath.Join(rs.vaultDir(req.Namespace, req.Vault), "run-*.json"))
	if err != nil {
		return nil, err
	}
	out := messages.RunListResult{Runs: []messages.RunInfo{}}
	for _, p := range paths {
		if info, err := rs.lookup(req, strings.TrimSuffix(filepath.Base(p), ".json")); err == nil {
			out.Runs = append(out.Runs, info)
		}
	}
	slices.SortFunc(out.Runs, func(a, b messages.RunInfo) int { return cmp.Compare(b.StartedAt, a.StartedAt) })
	if len(out.Runs) > runListMax {
		out.Runs = out.Runs[:runListMax]
	}
	return out, nil
}

func (rs *runs) logs(ctx context.Context, req messages.Request, a messages.RunLogsArgs) (any, error) {
	info, err := rs.status(req, a.ID)
	if err != nil {
		return nil, err
	}
	max := a.MaxBytes
	if max <= 0 || max > runLogPage {
		max = runLogPage
	}
	chunks, next, err := readLog(filepath.Join(rs.vaultDir(req.Namespace, req.Vault), a.ID+".log"), a.Since, info.LogBytes, max)
	if err != nil {
		return nil, err
	}
	return messages.RunLogsResult{Chunks: chunks, Next: next, State: info.State, Done: info.State != messages.RunRunning && next == info.LogBytes}, nil
}

// readLog reads the chunks of the log at path between since and size
// (the bytes known to be complete lines): whole lines, about max bytes of
// them, but at least one.
func readLog(path string, since, size int64, max int) ([]messages.OutputChunk, int64, error) {
	chunks := []messages.OutputChunk{}
	if since < 0 || since > size {
		return nil, 0, messages.Errorf(messages.CodeInvalidArgument, "cursor %d is outside the run's log (0..%d)", since, size)
	}
	if since == size {
		return chunks, since, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("run log: %w", err)
	}
	defer f.Close()
	if since > 0 {
		var b [1]byte
		if _, err := f.ReadAt(b[:], since-1); err != nil || b[0] != '\n' {
			return nil, 0, messages.Errorf(messages.CodeInvalidArgument, "cursor %d is not one avfs gave out: pass 0 or the next of an earlier answer", since)
		}
	}
	br := bufio.NewReader(io.NewSectionReader(f, since, size-since))
	next := since
	for next < size {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // a partial line: not complete yet
		}
		var ch messages.OutputChunk
		if err := json.Unmarshal(bytes.TrimSpace(line), &ch); err != nil {
			return nil, 0, fmt.Errorf("run log line at %d: %w", next, err)
		}
		chunks = append(chunks, ch)
		next += int64(len(line))
		if next-since >= int64(max) {
			break
		}
	}
	return chunks, next, nil
}

// runLog is a run's output log, appended by the exec's two output
// goroutines.
type runLog struct {
	mu        sync.Mutex
	f         *os.File
	size      int64
	seq       int64
	truncated bool
}

func (l *runLog) write(stream string, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.truncated || l.f == nil {
		return
	}
	b, err := json.Marshal(messages.OutputChunk{Seq: l.seq + 1, Stream: stream, Data: p})
	if err != nil {
		return
	}
	b = append(b, '\n')
	if l.size+int64(len(b)) > runLogMax {
		l.truncated = true
		return
	}
	if n, err := l.f.Write(b); err != nil || n != len(b) {
		// Readers never read past size, so a partial line is never
		// read; stop here so that no later line follows it.
		l.truncated = true
		return
	}
	l.seq++
	l.size += int64(len(b))
}

func (l *runLog) state() (size int64, truncated bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size, l.truncated
}

func (l *runLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// writeRecord replaces a run's record atomically.
func writeRecord(dir string, info messages.RunInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, info.ID+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("run record: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, info.ID+".json"))
}
