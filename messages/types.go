package messages

// VaultInfo describes a vault (docs/cli.md).
type VaultInfo struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	CreatedAt string `json:"created_at"`
	Files     int64  `json:"files"`
	Dirs      int64  `json:"dirs"`
	Bytes     int64  `json:"bytes"`
	// StoredBytes is null where it was not computed: a fork's reply
	// leaves it out because computing it walks the whole tree (ask
	// vault.info).
	StoredBytes *int64    `json:"stored_bytes"`
	Checkpoints int64     `json:"checkpoints"`
	Parent      *string   `json:"parent"`
	Quota       QuotaArgs `json:"quota"`
	Worker      string    `json:"worker"`
	// ExpiresAt is when the vault's owner deletes it (a fork made with
	// a TTL), RFC 3339; null: never.
	ExpiresAt *string `json:"expires_at"`
}

// VaultResult: vault.create, vault.info (and `vault use`).
type VaultResult struct {
	Vault VaultInfo `json:"vault"`
}

// VaultListResult: vault.list.
type VaultListResult struct {
	Vaults []VaultInfo `json:"vaults"`
	// Unanswered named the workers that did not answer a list fanned out
	// to them. The dispatcher now answers from the catalog, whole, and
	// leaves it out; it stays for the clients that print it.
	Unanswered []string `json:"unanswered_workers,omitempty"`
}

// ForkResult: vault.fork.
type ForkResult struct {
	Vault      VaultInfo `json:"vault"`
	Source     string    `json:"source"`
	DurationMS float64   `json:"duration_ms"`
}

// DeletedResult: vault.delete, checkpoint.delete.
type DeletedResult struct {
	Deleted string `json:"deleted"`
}

// TransferResult: vault.export, vault.import. File is the file on the
// caller's machine (in-process; the CLI fills it in after a fleet
// transfer); Object, through a fleet, is the export to fetch.
type TransferResult struct {
	Vault  VaultInfo  `json:"vault"`
	File   string     `json:"file"`
	Bytes  int64      `json:"bytes"`
	Object *ObjectRef `json:"object,omitempty"`
}

// ObjectRef names an object in a namespace's transfer bucket.
type ObjectRef struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	// Digest is the object store's "SHA-256=<base64url>" of the content.
	Digest string `json:"digest"`
}

// TransferOpenResult: transfer.open, the namespace's transfer bucket
// (created if absent) and its limits.
type TransferOpenResult struct {
	Bucket     string `json:"bucket"`
	MaxBytes   int64  `json:"max_bytes"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

// WriteResult: file.write.
type WriteResult struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Created bool   `json:"created"`
}

// CatResult: file.cat. Content is set for UTF-8 text, ContentBase64
// otherwise, Object for content too large for a reply.
type CatResult struct {
	Path          string     `json:"path"`
	Size          int64      `json:"size"`
	Content       *string    `json:"content,omitempty"`
	ContentBase64 *string    `json:"content_base64,omitempty"`
	Object        *ObjectRef `json:"object,omitempty"` // instead of content, when asked (CatArgs.Object)
}

// Entry describes a file, directory or symlink (file.stat, file.ls).
type Entry struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"`
	Mtime  string `json:"mtime"`
	Ino    uint64 `json:"ino"`
	Target string `json:"target,omitempty"`
	// Nlink is the link count: the names of a file (more than one for a
	// hard link), 2 plus the subdirectories of a directory.
	Nlink uint32 `json:"nlink"`
}

// LsResult: file.ls.
type LsResult struct {
	Path    string  `json:"path"`
	Entries []Entry `json:"entries"`
}

// PathResult: file.mkdir, file.rm, file.mv, file.cp, file.ln.
type PathResult struct {
	Path    string `json:"path"`
	From    string `json:"from,omitempty"`
	Removed bool   `json:"removed,omitempty"`
}

// BatchResult: file.write_batch and the CLI's import/export.
type BatchResult struct {
	Files      int64   `json:"files"`
	Dirs       int64   `json:"dirs"`
	Bytes      int64   `json:"bytes"`
	DurationMS float64 `json:"duration_ms"`
}

// ReadTreeResult: file.read_tree.
type ReadTreeResult struct {
	Files []BatchFile `json:"files"`
	Next  string      `json:"next,omitempty"` // empty when done
}

// Checkpoint describes a checkpoint.
type Checkpoint struct {
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
	Files     int64  `json:"files"`
	Bytes     int64  `json:"bytes"`
	Message   string `json:"message"`
	Auto      bool   `json:"auto"`
}

// CheckpointResult: checkpoint.save.
type CheckpointResult struct {
	Checkpoint Checkpoint `json:"checkpoint"`
}

// CheckpointListResult: checkpoint.list.
type CheckpointListResult struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Change is one changed path.
type Change struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// ChangeSummary compares two states of a vault; lists sorted by path.
type ChangeSummary struct {
	Added        []Change `json:"added"`
	Modified     []Change `json:"modified"`
	Deleted      []Change `json:"deleted"`
	BytesAdded   int64    `json:"bytes_added"`
	BytesRemoved int64    `json:"bytes_removed"`
}

// RestoreResult: checkpoint.restore. Changes is what the restore undid,
// from the checkpoint to the tree as it was just before the restore
// (Direction RestoreUndone): an added path is one the restore removed, a
// deleted one a path it brought back, a modified one a file it reverted.
type RestoreResult struct {
	Checkpoint Checkpoint    `json:"checkpoint"`
	Changes    ChangeSummary `json:"changes"`
	Direction  string        `json:"direction"`
}

// RestoreUndone is RestoreResult.Direction: changes runs from the
// checkpoint to the pre-restore tree, the changes the restore undid.
const RestoreUndone = "undone"

// DiffResult: checkpoint.diff.
type DiffResult struct {
	From    string        `json:"from"`
	To      string        `json:"to"`
	Changes ChangeSummary `json:"changes"`
}

// Usage is what quotas count.
type Usage struct {
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"`
	// UniqueBytes is what max_size_mb counts in the unique quota mode
	// (the distinct chunks the live tree references); null in logical
	// mode, where Bytes is what it counts.
	UniqueBytes *int64 `json:"unique_bytes,omitempty"`
}

// QuotaResult: quota.get, quota.set. Mode is the vault's quota mode,
// logical or unique (vault.set quota_mode).
type QuotaResult struct {
	Quota QuotaArgs `json:"quota"`
	Usage Usage     `json:"usage"`
	Mode  string    `json:"mode"`
}

// AuditEvent is one audit record.
type AuditEvent struct {
	ID        int64          `json:"id"`
	Time      string         `json:"time"`
	Namespace string         `json:"namespace"`
	Vault     string         `json:"vault"`
	Action    string         `json:"action"`
	Path      string         `json:"path"`
	Actor     string         `json:"actor"`
	RequestID string         `json:"request_id"`
	TraceID   string         `json:"trace_id"`
	Details   map[string]any `json:"details"`
}

// AuditResult: audit.query.
type AuditResult struct {
	Events []AuditEvent `json:"events"`
}

// MountArgs: mount.start and mount.stop.
type MountArgs struct {
	// Dir is the absolute path of an existing directory on the owner's
	// machine.
	Dir      string `json:"dir"`
	ReadOnly bool   `json:"readonly,omitempty"`
	// Machine identifies the caller's machine (/etc/machine-id, else
	// the host name): an owner on another machine refuses mount.start,
	// as it cannot mount there.
	Machine string `json:"machine,omitempty"`
}

// MountResult: mount.start and mount.stop.
type MountResult struct {
	Dir       string `json:"mountpoint"`
	Namespace string `json:"namespace"`
	Vault     string `json:"vault"`
	ReadOnly  bool   `json:"readonly"`
	Worker    string `json:"worker"`
}
