package messages

import "strings"

// Dead letters. A forwarded request that exhausts its worker consumer's
// deliveries (or that no dispatcher could place) is moved to StreamDLQ on
// avfs.v1.dlq.<ns>.<vault>.<op>, with its original headers plus
// HeaderDeadReason and HeaderDeadWorker, and its caller is answered with
// CodeUnavailable. `avfs fleet dlq` lists, replays and drops them.
const (
	SubjectDLQ = SubjectRoot + ".dlq"
	StreamDLQ  = "AVFS_DLQ"
	// HeaderDeadReason says why a request was dead-lettered.
	HeaderDeadReason = "Avfs-Dead-Reason"
	// HeaderDeadWorker is the worker whose deliveries ran out ("" when
	// the request was never placed).
	HeaderDeadWorker = "Avfs-Dead-Worker"
)

// DLQSubject is where a dead request for op on ns/vault is kept.
func DLQSubject(ns, vault string, op Op) string {
	if vault == "" {
		vault = NoVault
	}
	return strings.Join([]string{SubjectDLQ, ns, vault, string(op)}, ".")
}

// ParseDLQSubject splits a dead-letter subject into its tokens.
func ParseDLQSubject(subj string) (ns, vault string, op Op, ok bool) {
	rest, found := strings.CutPrefix(subj, SubjectDLQ+".")
	if !found {
		return "", "", "", false
	}
	return ParseRequestSubject(SubjectRequest + "." + rest)
}

// DeadLetter is one request in StreamDLQ.
type DeadLetter struct {
	Seq       uint64 `json:"seq"`
	Subject   string `json:"subject"`
	Op        Op     `json:"op"`
	Namespace string `json:"namespace"`
	Vault     string `json:"vault"`
	RequestID string `json:"request_id"`
	Reason    string `json:"reason"`
	Worker    string `json:"worker"`
	Time      string `json:"time"` // RFC 3339, when it was dead-lettered
}

// DeadLetters: fleet dlq list.
type DeadLetters struct {
	Dead []DeadLetter `json:"dead"`
}

// DLQReplayed: fleet dlq replay.
type DLQReplayed struct {
	Replayed  uint64 `json:"replayed"`
	RequestID string `json:"request_id"`
}

// DLQDropped: fleet dlq drop.
type DLQDropped struct {
	Dropped uint64 `json:"dropped"`
}
