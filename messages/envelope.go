package messages

import "strings"

// EnvelopeSchema is the schema tag of every ExecutionEnvelope.
const EnvelopeSchema = "avfs.execution_envelope.v1"

// Exec statuses.
const (
	StatusCompleted        = "completed"
	StatusTimedOut         = "timed_out"
	StatusCanceled         = "canceled"
	StatusDenied           = "denied"
	StatusApprovalRequired = "approval_required"
	StatusFailedToStart    = "failed_to_start"
)

// Decision is the policy's verdict on a command.
type Decision struct {
	Action     string   `json:"action"`
	Rule       string   `json:"rule"`
	Reason     string   `json:"reason"`
	Categories []string `json:"categories"`
}

// Envelope is what exec returns: docs/envelope.md.
type Envelope struct {
	Schema          string         `json:"schema"`
	RequestID       string         `json:"request_id"`
	Namespace       string         `json:"namespace"`
	Vault           string         `json:"vault"`
	Worker          string         `json:"worker"`
	Attempt         int            `json:"attempt"`
	Status          string         `json:"status"`
	Command         []string       `json:"command"`
	Shell           *string        `json:"shell"`
	Cwd             string         `json:"cwd"`
	Decision        Decision       `json:"decision"`
	Checkpoint      *string        `json:"checkpoint"`
	ApprovalID      *string        `json:"approval_id"`
	ExitCode        *int           `json:"exit_code"`
	Signal          *string        `json:"signal"`
	TimedOut        bool           `json:"timed_out"`
	Stdout          string         `json:"stdout"`
	Stderr          string         `json:"stderr"`
	StdoutBytes     int64          `json:"stdout_bytes"`
	StderrBytes     int64          `json:"stderr_bytes"`
	StdoutTruncated bool           `json:"stdout_truncated"`
	StderrTruncated bool           `json:"stderr_truncated"`
	StartedAt       string         `json:"started_at"`
	DurationMS      int64          `json:"duration_ms"`
	Changes         *ChangeSummary `json:"changes"`
	TraceID         string         `json:"trace_id"`
	// Error explains a failed_to_start status.
	Error string `json:"error,omitempty"`
}

// ExecArgs: exec.run.
type ExecArgs struct {
	Argv       []string          `json:"argv,omitempty"`
	Shell      string            `json:"shell,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`        // vault path, default "/"
	Timeout    string            `json:"timeout,omitempty"`    // Go duration, default 300s
	Checkpoint string            `json:"checkpoint,omitempty"` // auto | always | never
	Env        map[string]string `json:"env,omitempty"`
	Stdin      []byte            `json:"stdin,omitempty"`
}

// Approval is a request waiting for, or decided by, an operator.
type Approval struct {
	ID          string    `json:"id"`
	Namespace   string    `json:"namespace"`
	Vault       string    `json:"vault"`
	Command     []string  `json:"command"`
	Shell       string    `json:"shell,omitempty"`
	Reason      string    `json:"reason"`
	RequestedAt string    `json:"requested_at"`
	ExpiresAt   string    `json:"expires_at"`
	Status      string    `json:"status"` // pending | granted | denied | expired
	Decision    Decision  `json:"decision"`
	Envelope    *Envelope `json:"envelope,omitempty"`
}

// ApprovalArgs: approval.grant, approval.deny, approval.show.
type ApprovalArgs struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
}

// ApprovalResult: approval.grant, approval.deny, approval.show.
type ApprovalResult struct {
	Approval Approval `json:"approval"`
}

// ApprovalListResult: approval.list.
type ApprovalListResult struct {
	Approvals []Approval `json:"approvals"`
	// Unanswered names the live workers that did not answer in time: the
	// list may lack approvals they hold.
	Unanswered []string `json:"unanswered_workers,omitempty"`
}

// PolicyCheckArgs: policy.check.
type PolicyCheckArgs struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
}

// PolicyCheckResult: policy.check.
type PolicyCheckResult struct {
	Decision Decision `json:"decision"`
}

// CommandLine is how the command reads in logs, tables and checkpoint
// messages.
func (a ExecArgs) CommandLine() string {
	if a.Shell != "" {
		return a.Shell
	}
	return strings.Join(a.Argv, " ")
}
