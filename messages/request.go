package messages

import "encoding/json"

// Request is one call. Args holds the op's argument object (the *Args
// types below); the same document travels over NATS and through the
// in-process path.
type Request struct {
	Op        Op              `json:"op"`
	Namespace string          `json:"namespace"`
	Vault     string          `json:"vault,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
	Actor     string          `json:"actor,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
}

// Reply answers a Request: exactly one of Result (the op's result object,
// the same document `avfs --json` prints) and Error is set.
type Reply struct {
	RequestID string          `json:"request_id,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *Error          `json:"error,omitempty"`
}

// QuotaArgs are quota limits; nil is unlimited.
type QuotaArgs struct {
	MaxSizeMB     *int64 `json:"max_size_mb"`
	MaxFiles      *int64 `json:"max_files"`
	MaxFileSizeMB *int64 `json:"max_file_size_mb"`
}

// VaultCreateArgs: vault.create.
type VaultCreateArgs struct {
	Quota QuotaArgs `json:"quota"`
}

// VaultForkArgs: vault.fork; the request's Vault is the source.
type VaultForkArgs struct {
	Target     string `json:"target"`
	Checkpoint string `json:"checkpoint,omitempty"`
	// Placement says where a fleet puts the fork: PlacementSource (the
	// default) keeps it on its source's worker, where forking copies
	// nothing; PlacementSpread puts it on the least loaded worker, which
	// fetches the content it lacks by hash. Parallel attempts spread.
	Placement string `json:"placement,omitempty"`
	// TTL, a Go duration ("2h"), makes the fork expire: its owner
	// deletes it once the time passed (VaultInfo.ExpiresAt).
	TTL string `json:"ttl,omitempty"`
}

// Fork placements (VaultForkArgs.Placement).
const (
	PlacementSource = "source"
	PlacementSpread = "spread"
)

// VaultTransferArgs: vault.export and vault.import. In-process (the CLI
// without a fleet) File is a path on the caller's machine. Through a
// fleet no request names a path on the worker's machine: a worker
// refuses File with INVALID_ARGUMENT. There vault.export takes no args
// and answers with the export in the namespace's transfer bucket
// (TransferResult.Object), and vault.import takes Object, the name of an
// object the caller put in that bucket (TransferBucket).
type VaultTransferArgs struct {
	File   string `json:"file,omitempty"`
	Object string `json:"object,omitempty"`
}

// WriteArgs: file.write. Content travels inline; content too large for
// one message is put in the namespace's transfer bucket first and named
// by ContentObject instead (Content then stays empty).
type WriteArgs struct {
	Path          string `json:"path"`
	Content       []byte `json:"content"` // base64 in JSON
	ContentObject string `json:"content_object,omitempty"`
	Append        bool   `json:"append,omitempty"`
	Mode          string `json:"mode,omitempty"` // octal, e.g. "0644"
	Parents       bool   `json:"parents,omitempty"`
}

// BatchFile is one entry of a write batch.
type BatchFile struct {
	Path    string `json:"path"`
	Type    string `json:"type"` // file | dir | symlink
	Content []byte `json:"content,omitempty"`
	// ContentObject, through a fleet, names content in the namespace's
	// transfer bucket instead (as WriteArgs.ContentObject).
	ContentObject string `json:"content_object,omitempty"`
	Mode          string `json:"mode,omitempty"`
	Target        string `json:"target,omitempty"`
	Mtime         string `json:"mtime,omitempty"` // RFC 3339
}

// WriteBatchArgs: file.write_batch, many entries in one transaction
// (bulk import); missing parents are created.
type WriteBatchArgs struct {
	Files []BatchFile `json:"files"`
}

// PathArgs: file.stat.
type PathArgs struct {
	Path string `json:"path"`
}

// CatArgs: file.cat. A file whose content does not fit a reply is
// refused with INVALID_ARGUMENT (details "size" and "max_reply") unless
// Object is set: then the worker puts it in the namespace's transfer
// bucket and the result names it (CatResult.Object).
type CatArgs struct {
	Path   string `json:"path"`
	Object bool   `json:"object,omitempty"`
}

// LsArgs: file.ls.
type LsArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// MkdirArgs: file.mkdir.
type MkdirArgs struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// RmArgs: file.rm.
type RmArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// MoveArgs: file.mv, file.cp and file.ln (Src the existing name, Dst the new one).
type MoveArgs struct {
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	Recursive bool   `json:"recursive,omitempty"`
}

// ReadTreeArgs: file.read_tree, a page of a subtree with contents (bulk
// export). Pages end after about MaxBytes of content; pass the returned
// Next as After to continue.
type ReadTreeArgs struct {
	Path     string `json:"path"`
	After    string `json:"after,omitempty"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

// HostDirArgs: file.import_dir and file.export_dir, a whole tree between
// the vault's Path and HostDir, a directory on the machine that serves the
// request (as VaultTransferArgs.File is). An import is one transaction,
// refused before it writes anything when it would break a quota.
type HostDirArgs struct {
	HostDir string `json:"host_dir"`
	Path    string `json:"path"`
}

// CheckpointArgs: checkpoint.save, restore, delete.
type CheckpointArgs struct {
	Name    string `json:"name"`
	Message string `json:"message,omitempty"`
}

// DiffArgs: checkpoint.diff; an empty To is the current tree.
type DiffArgs struct {
	From string `json:"from"`
	To   string `json:"to,omitempty"`
}

// QuotaSetArgs: quota.set, one key as in VaultInfo.quota; Value nil
// clears the limit. A value is 0 to 2^40 (1099511627776) for the MB
// limits and 0 to 2^60 for max_files; others are INVALID_ARGUMENT.
type QuotaSetArgs struct {
	Key   string `json:"key"`
	Value *int64 `json:"value"`
}

// AuditArgs: audit.query.
type AuditArgs struct {
	Since   string `json:"since,omitempty"` // RFC 3339 or a duration ago ("10m")
	Action  string `json:"action,omitempty"`
	Path    string `json:"path,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	AfterID int64  `json:"after_id,omitempty"`
}
