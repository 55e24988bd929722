package messages

import "strings"

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

// Header names.
const (
	HeaderRequestID   = "Avfs-Request-Id"
	HeaderMsgID       = "Nats-Msg-Id" // JetStream deduplication: set to the request id
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	HeaderDeadline    = "Avfs-Deadline" // RFC 3339 time after which the caller stops waiting
)
