package messages

import (
	"strconv"
	"strings"
	"time"
)

// Version is the protocol version, the second token of every subject.
const Version = "v1"

// Subject prefixes. A request for op on vault v of namespace ns is
// published on avfs.v1.req.<ns>.<v>.<op>; namespace-scoped ops use "_" as
// the vault token. Tokens carry namespace and vault so that NATS
// permissions can confine an agent to its namespace and routing never
// parses bodies.
const (
	SubjectRoot    = "avfs." + Version
	SubjectRequest = SubjectRoot + ".req"
	SubjectAudit   = SubjectRoot + ".audit"
	// NoVault is the vault token of namespace-scoped requests.
	NoVault = "_"
)

// RequestSubject is the subject a request is published on.
func RequestSubject(ns, vault string, op Op) string {
	if vault == "" {
		vault = NoVault
	}
	return strings.Join([]string{SubjectRequest, ns, vault, string(op)}, ".")
}

// Audit stream. Every audit event is published to StreamAudit on
// avfs.v1.audit.<ns>.<vault>.<action> (the action's dots make further
// tokens: ...file.write), with Nats-Msg-Id = "<worker>-<store audit id>",
// so that a worker that publishes an event twice (a restart before it
// recorded its progress) stores it once. The stream keeps events by age
// (limits retention), AuditMaxAge by default.
const (
	StreamAudit = "AVFS_AUDIT"
	AuditMaxAge = 7 * 24 * time.Hour
)

// AuditSubject is the subject event e is published on. Empty tokens
// become NoVault so the subject stays valid.
func AuditSubject(ns, vault, action string) string {
	tok := func(s string) string {
		if s == "" {
			return NoVault
		}
		return s
	}
	return strings.Join([]string{SubjectAudit, tok(ns), tok(vault), tok(action)}, ".")
}

// AuditMsgID is the Nats-Msg-Id of the audit event with id id in worker's
// store.
func AuditMsgID(worker string, id int64) string {
	return worker + "-" + strconv.FormatInt(id, 10)
}

// AuditFilterSubject is the subject filter for the events of ns/vault
// ("" or "*" for every vault) matching an AuditArgs action filter: an
// exact action, or a prefix ending in "." or "*" ("file.", "checkpoint.*").
func AuditFilterSubject(ns, vault, action string) string {
	if vault == "" {
		vault = "*"
	}
	base := SubjectAudit + "." + ns + "." + vault
	a := strings.TrimSuffix(action, "*")
	switch {
	case a == "":
		return base + ".>"
	case strings.HasSuffix(a, "."):
		return base + "." + a + ">"
	default:
		return base + "." + a
	}
}

// Matches reports whether an event with action and path passes the
// filter's Action and Path, as audit.query applies them (Since and
// AfterID are not looked at).
func (a AuditArgs) Matches(action, path string) bool {
	if f := strings.TrimSuffix(a.Action, "*"); f != "" {
		if strings.HasSuffix(f, ".") {
			if !strings.HasPrefix(action, f) {
				return false
			}
		} else if action != f {
			return false
		}
	}
	if p := a.Path; p != "" && p != "/" {
		p = strings.TrimSuffix(p, "/")
		if path != p && !strings.HasPrefix(path, p+"/") {
			return false
		}
	}
	return true
}

// Header names.
const (
	HeaderRequestID   = "Avfs-Request-Id"
	HeaderMsgID       = "Nats-Msg-Id" // JetStream deduplication: IntakeMsgID
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	HeaderDeadline    = "Avfs-Deadline" // RFC 3339 time after which the caller stops waiting
	// HeaderFenced counts how many times workers that no longer owned the
	// request's vault sent it back to the intake.
	HeaderFenced = "Avfs-Fenced"
)

// IntakeMsgID is the Nats-Msg-Id a request is published to the intake
// with: its request id scoped like the request log (namespace and vault),
// so that two tenants using the same id are never deduplicated against
// each other.
func IntakeMsgID(ns, vault, requestID string) string {
	if vault == "" {
		vault = NoVault
	}
	return ns + "." + vault + "." + requestID
}

// Fleet plumbing: JetStream streams, KV buckets and the forwarding subject.
// Requests land in StreamRequests (a work queue, deduplicated by
// Nats-Msg-Id = IntakeMsgID); a dispatcher moves each to its vault's owner
// on avfs.v1.work.<worker>.<ns>.<vault>.<op> in StreamWork, which the
// worker consumes through a consumer filtered on its own id.
const (
	SubjectWork    = SubjectRoot + ".work"
	StreamRequests = "AVFS_REQ"
	StreamWork     = "AVFS_WORK"
	BucketMembers  = "avfs_members" // worker and dispatcher heartbeats (TTL)
	BucketOwners   = "avfs_owners"  // VaultKey(ns, vault) -> Owner
	// BucketAttempts keeps, per request id, the serialized span context
	// of the request's latest process span (TTL 1 h), so a redelivered or
	// rescued attempt links to the one before it.
	BucketAttempts = "avfs_attempts"
	// HeaderReplyTo is the inbox on which the caller waits for the Reply.
	HeaderReplyTo = "Avfs-Reply-To"
	// HeaderOutputTo, on an exec.run request, is an inbox to which the
	// worker publishes the command's output as OutputChunk messages
	// while it runs, before the Reply.
	HeaderOutputTo = "Avfs-Output-To"
)

// VaultKey is a vault's key in BucketOwners, BucketHeads and
// BucketCatalog: "<ns>.<vault>". Names are single tokens (ValidName), so
// the key splits back unambiguously and NamespaceKeys filters it.
func VaultKey(ns, vault string) string { return ns + "." + vault }

// NamespaceKeys is the key filter of every key of namespace ns in
// BucketCatalog and BucketApprovals.
func NamespaceKeys(ns string) string { return ns + ".*" }

// The catalogs. The dispatcher routes every request, namespace-scoped ones
// included, so that routing has one owner (docs/decisions.md). With a
// store per machine no worker sees a namespace whole; two KV buckets do,
// written by the vaults' owners and read by the dispatcher:
//
//   - BucketCatalog: VaultKey(ns, vault) -> VaultInfo, the vault as its
//     owner last described it. The owner writes it before answering
//     vault.create, vault.import and vault.fork (the target, also when the
//     fork is handed to another worker), deletes it before answering
//     vault.delete, and rewrites it shortly after any other change and
//     when it takes a vault over. Entries outlive their worker: a stopped
//     worker's vaults stay listed. The dispatcher answers vault.list from
//     it, with each vault's worker taken from BucketOwners.
//   - BucketApprovals: ApprovalKey(ns, id) -> Approval (without its
//     envelope), written by the worker holding it when a command is held
//     and after every approval.show, .grant and .deny. The dispatcher
//     answers approval.list from it, and routes approval.show, .grant and
//     .deny to the owner of the approval's vault, like a vault op: on
//     avfs.v1.work.<worker>.<ns>.<vault>.<op>, with the body's vault left
//     empty (the subject's token fills it in).
//
// Both are read with a watch that waits for the initial values, never a
// no-wait read of a new consumer, so a list is never short.
const (
	BucketCatalog   = "avfs_catalog"   // VaultKey(ns, vault) -> VaultInfo
	BucketApprovals = "avfs_approvals" // ApprovalKey(ns, id) -> Approval
)

// ApprovalKey is approval id's key in BucketApprovals; ok is false when
// id cannot be a key token (then no approval has it).
func ApprovalKey(ns, id string) (key string, ok bool) {
	if !ValidName(id) {
		return "", false
	}
	return ns + "." + id, true
}

// DispatcherOp reports whether the dispatcher answers op itself, from the
// catalogs, rather than forwarding it to a worker.
func DispatcherOp(op Op) bool { return op == OpVaultList || op == OpApprovalList }

// ApprovalOp reports whether op addresses one approval, and is routed to
// the owner of the approval's vault.
func ApprovalOp(op Op) bool {
	return op == OpApprovalShow || op == OpApprovalGrant || op == OpApprovalDeny
}

// PullExpiry is how long the dispatchers' and workers' pull requests on
// the streams last (their heartbeats come every half of it). A pull
// request lost with a NATS node, or with a consumer leader that moved,
// is noticed by two missed heartbeats and made again: with the client
// library's 30 s default, requests waited up to a minute after a node
// stopped in a cluster (e2e/cluster_test.go); with 4 s, a few seconds.
const PullExpiry = 4 * time.Second

// Membership timing, which bounds failover (docs/protocol.md §7, "Dead
// workers"). Workers and dispatchers put their heartbeat in BucketMembers
// every HeartbeatInterval; the bucket's TTL is MemberTTL, so a member is
// gone MemberTTL after its last heartbeat (MemberTTL/HeartbeatInterval
// heartbeats missed in a row). Dispatchers look for dead workers every
// HeartbeatInterval and take a worker for dead on two looks in a row. A
// SIGKILLed owner's vaults are therefore served again by another worker
// within MemberTTL + 2*HeartbeatInterval plus the takeover (measured:
// BenchmarkFailover, BENCHMARKS.md). With 2 s and 10 s it took 12-14 s.
const (
	HeartbeatInterval = time.Second
	MemberTTL         = 5 * time.Second
)

// Work consumers and heartbeat keys. Worker w consumes StreamWork through
// the durable consumer WorkConsumer(w), filtered on WorkFilter(w); a
// dispatcher taking over a dead worker's pending work deletes that
// consumer and reads the same filter. Heartbeats in BucketMembers are
// under WorkerPrefix+id and DispatcherPrefix+id.
const (
	WorkerPrefix     = "worker."
	DispatcherPrefix = "dispatcher."
	// WorkConsumerPrefix starts every worker's consumer name.
	WorkConsumerPrefix = "worker-"
)

// WorkConsumer is the name of worker w's consumer of StreamWork.
func WorkConsumer(w string) string { return WorkConsumerPrefix + w }

// WorkFilter is the subject filter of worker w's work.
func WorkFilter(w string) string { return SubjectWork + "." + w + ".>" }

// WorkSubject is where a dispatcher forwards a request for worker w.
func WorkSubject(w, ns, vault string, op Op) string {
	if vault == "" {
		vault = NoVault
	}
	return strings.Join([]string{SubjectWork, w, ns, vault, string(op)}, ".")
}

// Peer requests. A worker answers core-NATS requests on
// avfs.v1.peer.<worker>.<ns>._.<op> from another worker that names it:
// the body is a Request for OpVaultPush (messages/merge.go), the reply a
// Reply. Only workers may publish here, since a peer request skips the
// dispatcher. (Namespace-scoped ops are not fanned out here: the
// dispatcher answers them from the catalogs.)
const SubjectPeer = SubjectRoot + ".peer"

// PeerSubject is where a worker asks worker w about namespace ns.
func PeerSubject(w, ns string, op Op) string {
	return strings.Join([]string{SubjectPeer, w, ns, NoVault, string(op)}, ".")
}

// The direct path. A client that knows a vault's owner (from the reply
// headers below) may send it the vault's requests as core NATS requests on
// avfs.v1.direct.<worker>.<ns>.<vault>.<op>, skipping the two file-backed
// JetStream hops of the intake. Namespace and vault stay tokens so that
// NATS permissions confine direct requests exactly as intake ones. The
// worker answers on the message's reply subject; when it cannot serve the
// request (not the owner, queue full, stopping, an op that must go through
// the intake) it answers at once with HeaderUseIntake and does nothing
// else, and the client sends the same request, same id, to the intake.
const (
	SubjectDirect = SubjectRoot + ".direct"
	// HeaderWorker names the worker that answered a request.
	HeaderWorker = "Avfs-Worker"
	// HeaderOwnerEpoch is the vault's owner epoch, set on a reply when
	// the answering worker is the vault's owner: the client may then send
	// that vault's direct ops to HeaderWorker.
	HeaderOwnerEpoch = "Avfs-Owner-Epoch"
	// HeaderUseIntake on a reply to a direct request means it was not
	// served; its value is the reason (not-owner, busy, stopping, op).
	HeaderUseIntake = "Avfs-Use-Intake"
)

// DirectSubject is where a client sends op on ns/vault straight to worker w.
func DirectSubject(w, ns, vault string, op Op) string {
	return strings.Join([]string{SubjectDirect, w, ns, vault, string(op)}, ".")
}

// DirectOp reports whether op may take the direct path: vault-scoped
// reads and short mutations. exec.run keeps the intake's progress and
// redelivery; placement changes (vault.create, fork, delete, import) and
// namespace-scoped ops stay with the dispatcher.
func DirectOp(op Op) bool {
	switch op {
	case OpExec, OpVaultCreate, OpVaultFork, OpVaultDelete, OpVaultImport, OpVaultExport:
		return false
	}
	return op.NeedsVault()
}

// ValidReplyTo reports whether a reply may be published to subj. Replies
// go only to inboxes: a reply-to naming a request, work or system subject
// would let a caller make a worker or dispatcher publish a request on its
// behalf, outside the caller's permissions.
func ValidReplyTo(subj string) bool {
	return strings.HasPrefix(subj, "_INBOX") && !strings.ContainsAny(subj, " \t\r\n*>")
}

// ParseRequestSubject splits a request subject into its tokens.
func ParseRequestSubject(subj string) (ns, vault string, op Op, ok bool) {
	rest, found := strings.CutPrefix(subj, SubjectRequest+".")
	if !found {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	if parts[1] == NoVault {
		parts[1] = ""
	}
	return parts[0], parts[1], Op(parts[2]), true
}

// Member is a worker's or dispatcher's heartbeat in BucketMembers, under
// key "worker.<id>" or "dispatcher.<id>".
type Member struct {
	ID           string  `json:"id"`
	Kind         string  `json:"kind"` // worker | dispatcher
	Vaults       int     `json:"vaults"`
	RunningExecs int     `json:"running_execs"`
	Load         float64 `json:"load"`
	LastSeen     string  `json:"last_seen"`
}

// Owner is a vault's placement in BucketOwners. Epoch grows with every
// reassignment, so a stale owner can tell it was replaced.
type Owner struct {
	Worker string `json:"worker"`
	Epoch  int64  `json:"epoch"`
	// Request is the id of the request that placed the vault (a create or
	// a fork), so that its worker tells its own placement, and the
	// request's retries, from a vault that already existed.
	Request string `json:"request,omitempty"`
}

// FleetStatus: fleet status.
type FleetStatus struct {
	Workers     []Member `json:"workers"`
	Dispatchers int      `json:"dispatchers"`
}
