package messages

// Live output and background runs (docs/protocol.md, "Live output" and
// "Background runs").

// Output streams (OutputChunk.Stream).
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// OutputChunk is a piece of a command's output, in the order it was read.
// It is the body of a live-output message (HeaderOutputTo) and one entry
// of a run's log (run.logs).
type OutputChunk struct {
	// Seq numbers the chunks 1, 2, ...: per delivery attempt on a live
	// stream, per run in a run's log. A gap means chunks were lost.
	Seq    int64  `json:"seq"`
	Stream string `json:"stream"` // stdout | stderr
	Data   []byte `json:"data"`   // base64 in JSON
	// RequestID and Attempt are set on live-output messages: a
	// redelivered exec runs the command again, and its chunks start
	// over at seq 1 with the next attempt number.
	RequestID string `json:"request_id,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
}

// Run states (RunInfo.State).
const (
	RunRunning = "running"
	RunDone    = "done"
	// RunLost: the worker that ran the command stopped before it ended
	// (a crash, a kill -9); there is no envelope.
	RunLost = "lost"
)

// RunInfo describes a background run (run.start, run.status, run.list).
type RunInfo struct {
	ID         string   `json:"id"`
	Namespace  string   `json:"namespace"`
	Vault      string   `json:"vault"`
	Worker     string   `json:"worker"`
	State      string   `json:"state"` // running | done | lost
	Command    []string `json:"command"`
	Shell      *string  `json:"shell"`
	StartedAt  string   `json:"started_at"`
	FinishedAt *string  `json:"finished_at"`
	// LogBytes is the size of the run's log: the cursor at its end.
	LogBytes int64 `json:"log_bytes"`
	// LogTruncated: the command wrote more than the log keeps (the
	// envelope's head and tail still hold its ends).
	LogTruncated bool `json:"log_truncated"`
	// Envelope is the run's ExecutionEnvelope once it is done; its
	// request_id is the run id.
	Envelope *Envelope `json:"envelope"`
	// Error says why a run that is done has no envelope: the command
	// could not be run at all (its cwd is missing, the vault was deleted).
	Error *Error `json:"error,omitempty"`
}

// RunResult: run.start, run.status, run.kill.
type RunResult struct {
	Run RunInfo `json:"run"`
}

// RunListResult: run.list, newest first.
type RunListResult struct {
	Runs []RunInfo `json:"runs"`
}

// RunArgs: run.status, run.kill.
type RunArgs struct {
	ID string `json:"id"`
}

// RunLogsArgs: run.logs. Since is a cursor: 0 for the start, else the
// Next of an earlier answer. MaxBytes bounds the answer (default and
// maximum 1 MiB of log; at least one chunk is returned).
type RunLogsArgs struct {
	ID       string `json:"id"`
	Since    int64  `json:"since,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// RunLogsResult: run.logs. Next is the cursor to pass as Since to read
// on; it never moves backwards and stays valid for the run's lifetime.
// Done is true when the run has ended and Next is at the log's end:
// nothing more will come.
type RunLogsResult struct {
	Chunks []OutputChunk `json:"chunks"`
	Next   int64         `json:"next"`
	Done   bool          `json:"done"`
	State  string        `json:"state"`
}
