package messages

import (
	"bytes"
	"encoding/json"
	"errors"
)

// The change log (docs/protocol.md "Change log", docs/decisions.md §30).
// Every acknowledged change of a vault is held by JetStream before its
// reply is sent: one stream, StreamLog, holds every vault's entries on
// avfs.v1.log.<ns>.<vault>, with the fleet's replica count. The head's
// snapshot (BucketHeads, Head.LogSeq) plus the entries after it are the
// vault; a new owner applies them before it serves the vault.
//
// Only the owner of the current epoch appends: every append carries
// Nats-Expected-Last-Subject-Sequence (the sequence of the last entry the
// owner appended or read), and a new owner, once it has read the log to
// its end, appends an epoch entry. An old owner that comes back (paused,
// cut off) then gets a wrong-sequence error on its next append, does not
// acknowledge the change, and learns it lost the vault.
const (
	StreamLog  = "AVFS_LOG"
	SubjectLog = SubjectRoot + ".log"
)

// LogSubject is the change log subject of vault ns/vault.
func LogSubject(ns, vault string) string { return SubjectLog + "." + ns + "." + vault }

// Kinds of change log entries.
const (
	// LogOp is a request that changed the vault, replayed through the
	// handler by a new owner; its request id and result travel with it,
	// so a retry is answered from the result wherever the vault is.
	LogOp = "op"
	// LogEpoch marks a new owner's takeover: nothing to apply.
	LogEpoch = "epoch"
	// LogSnapshot marks a change the log cannot replay (an exec's
	// effects, a fork, a create, an import): the owner pushes the vault's
	// snapshot with this entry's sequence as Head.LogSeq before it
	// answers. A snapshot entry above the head's LogSeq is one whose push
	// never landed (its request was not acknowledged): it is skipped.
	LogSnapshot = "snapshot"
	// LogResult carries the request log row of a request whose change
	// is kept elsewhere (a fork: its target, by the target's own
	// snapshot), or that changed nothing but its audit log (an exec
	// whose change summary is empty: Audit holds its event): a new owner
	// records Result (the store's encoding) under the request's id and
	// ArgsHash, and the Audit events, without running anything, so a
	// retry is answered from it.
	LogResult = "result"
)

// ChangeEntry is one entry of a vault's change log.
type ChangeEntry struct {
	Kind   string `json:"kind"`   // LogOp, LogEpoch, LogSnapshot or LogResult
	Epoch  int64  `json:"epoch"`  // owner epoch (BucketOwners) of the writer
	Worker string `json:"worker"` // the worker that appended it
	// Time is the time the change's transactions used (RFC 3339 with
	// nanoseconds): a replay uses it too, so times replay equal.
	Time string `json:"time"`
	// Request is the change itself (LogOp), or the request that asked
	// for a snapshot (LogSnapshot).
	Request *Request `json:"request,omitempty"`
	// Result is the original reply's result (LogOp).
	Result json.RawMessage `json:"result,omitempty"`
	// Reason says why a snapshot was taken (an op, "background").
	Reason string `json:"reason,omitempty"`
	// ArgsHash is the request's argument digest (LogResult), as its
	// request log row holds it.
	ArgsHash string `json:"args_hash,omitempty"`
	// Audit is what a LogResult's request added to the vault's audit log
	// (an exec's exec.run event), recorded again by a replay.
	Audit []AuditEvent `json:"audit,omitempty"`
}

// EncodeEntry is json.Marshal(e) with the request's Args and e.Result
// put in as they are: json.Marshal validates and compacts every
// json.RawMessage again, a scan of each byte that cost as much as the rest
// of the entry's encoding for a 1 KiB write (BENCHMARKS.md "tput2"). Both
// must therefore be valid JSON already, as json.Marshal's output is (the
// change log encodes them itself); empty ones are left out, as omitempty
// does. The result decodes to the same ChangeEntry as json.Marshal's.
func EncodeEntry(e ChangeEntry) ([]byte, error) {
	req, result := e.Request, e.Result
	e.Request, e.Result = nil, nil
	head, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if req == nil && len(result) == 0 {
		return head, nil
	}
	var args []byte
	var rb []byte
	if req != nil {
		r := *req
		args, r.Args = bytes.TrimSpace(r.Args), nil
		if rb, err = json.Marshal(r); err != nil {
			return nil, err
		}
	}
	result = bytes.TrimSpace(result)
	if head[len(head)-1] != '}' || (rb != nil && rb[len(rb)-1] != '}') {
		return nil, errors.New("encode change log entry: not an object")
	}
	b := make([]byte, 0, len(head)+len(rb)+len(args)+len(result)+32)
	b = append(b, head[:len(head)-1]...)
	if rb != nil {
		b = append(b, `,"request":`...)
		b = append(b, rb[:len(rb)-1]...)
		if len(args) > 0 {
			if len(rb) > 2 {
				b = append(b, ',')
			}
			b = append(b, `"args":`...)
			b = append(b, args...)
		}
		b = append(b, '}')
	}
	if len(result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, result...)
	}
	return append(b, '}'), nil
}
