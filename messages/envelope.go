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
	// StatusLimitExceeded: the sandbox's memory limit ended the command
	// (signal SIGKILL, sandbox.limit "memory").
	StatusLimitExceeded = "limit_exceeded"
)

// Sandbox modes.
const (
	SandboxNamespaces = "namespaces"
	SandboxNone       = "none"
)

// Decision is the policy's verdict on a command.
type Decision struct {
	Action     string   `json:"action"`
	Rule       string   `json:"rule"`
	Reason     string   `json:"reason"`
	Categories []string `json:"categories"`
	// Network: the deciding rule grants the host's network to the run.
	Network bool `json:"network,omitempty"`
	// RequireSandbox: a matching rule refuses the command outside a sandbox.
	RequireSandbox bool `json:"require_sandbox,omitempty"`
}

// SandboxInfo is what confined a command: docs/envelope.md.
type SandboxInfo struct {
	Mode    string `json:"mode"`    // namespaces | none
	Network bool   `json:"network"` // the host's network was shared (always true for none)
	// Why the network was given: "vault" (configured), "rule" (the policy
	// rule that decided the command), "approval" (that rule, after an
	// operator granted the run); "" when not given, "host" for mode none.
	NetworkBy string        `json:"network_by,omitempty"`
	Limits    SandboxLimits `json:"limits"`
	// Limit names the limit the command hit: memory (it was killed) or
	// pids (forks were refused); "" when none was.
	Limit string `json:"limit,omitempty"`
	// Refused lists what the sandbox refused the command; left out when
	// nothing was.
	Refused []SandboxRefusal `json:"refused,omitempty"`
}

// SandboxRefusal is one kind of thing the sandbox refused a command,
// counted: a system call its seccomp filter stops (kind "syscall": mount,
// umount2, unshare, setns, clone with a namespace flag, pivot_root,
// chroot, the fs* mount calls, ptrace of the sandbox's init) or, without
// the network, a connection to an address off its own loopback (kind
// "network", call "connect", target "address:port").
type SandboxRefusal struct {
	Kind   string `json:"kind"`
	Call   string `json:"call"`
	Target string `json:"target,omitempty"`
	Count  int    `json:"count"`
}

// SandboxLimits are the cgroup limits a command ran under; 0 = none.
type SandboxLimits struct {
	MemoryBytes int64   `json:"memory_bytes"`
	Pids        int     `json:"pids"`
	CPUs        float64 `json:"cpus"`
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
	// Sandbox is set once the command was started (or failed to start).
	Sandbox *SandboxInfo `json:"sandbox,omitempty"`
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
	// Limits for this command only; each may only lower the vault's (or
	// the configuration's) limit, 0 keeps it: docs/cli.md, exec.
	MemoryMB int64   `json:"memory_mb,omitempty"`
	Pids     int     `json:"pids,omitempty"`
	CPUs     float64 `json:"cpus,omitempty"`
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
	// Unanswered: see VaultListResult.Unanswered (always left out now).
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
