package messages

// Vault handoff between machines, by content hash, in three JetStream
// buckets:
//
//   - BucketChunks (KV): one content chunk (at most 64 KiB) per key, the
//     hex SHA-256 of its data. Written once (KV create; rewritten with
//     the same bytes only while a chunk sweep runs, worker/chunkgc.go):
//     any worker that needs the chunk reads it, and one that has it never
//     sends it again. A KV get is one round trip (direct get); an
//     object-store get sets up a consumer per object, which made fetching
//     a vault of small files several times slower (BENCHMARKS.md).
//   - BucketVaults (object store): manifests, each a vault's export
//     without chunk data (one SQLite file: trees, checkpoints, audit log,
//     request log), under a name unique to the push
//     (ManifestObject(ns, vault, id)), never overwritten.
//   - BucketHeads (KV): per vault (key <ns>.<vault>), the Head naming its
//     current manifest. A push uploads its manifest, then moves the head
//     by compare-and-set, refusing to replace a head of a later owner
//     epoch: a slow push of a replaced owner cannot overwrite its
//     successor's. A deleted vault's head is a tombstone (Deleted).
//
// The owner of a vault pushes it (the chunks the bucket lacks, the
// manifest, the head) after vault.create, vault.import, vault.fork (the
// target), checkpoint.save, checkpoint.restore and a vault.merge that
// changed the target, and for every vault
// changed since its last push when it stops gracefully; vault.delete
// pushes the tombstone. A fork placed on another worker is pushed before
// the fork is answered.
//
// A worker about to serve a vault under an owner epoch it has not served
// it under yet compares its copy with the head: it takes the head's
// manifest (fetching only the chunks its store lacks) when it has no
// copy, or when the head came from another store at a later epoch than
// its copy's. In the replication modes sync and async it then applies the
// vault's change log after the head's LogSeq (replog.go), so nothing
// acknowledged is lost; in mode checkpoint a vault reassigned from a dead
// worker is served from its last push: what a failover loses (the RPO) is
// every change after that push, unless the new owner shares the old one's
// store.
const (
	BucketVaults = "avfs_vaults" // object store: vault manifests
	BucketChunks = "avfs_chunks" // KV: <hex sha256> -> chunk data; ChunkGCKey -> the GC state
	BucketHeads  = "avfs_heads"  // KV: <ns>.<vault> -> Head

	// Manifest object metadata, for people browsing the bucket; the
	// fleet reads the head.
	ObjectMetaEpoch      = "avfs-epoch"
	ObjectMetaStore      = "avfs-store"
	ObjectMetaCheckpoint = "avfs-checkpoint"
	ObjectMetaWorker     = "avfs-worker"
	ObjectMetaReason     = "avfs-reason"
)

// Head is a vault's current pushed copy, in BucketHeads.
type Head struct {
	Object     string `json:"object,omitempty"` // manifest name in BucketVaults; empty when Deleted
	Epoch      int64  `json:"epoch"`            // owner epoch (BucketOwners) of the push
	Store      string `json:"store"`            // id of the store the copy was taken from
	Worker     string `json:"worker"`           // the worker that pushed it
	Time       string `json:"time"`             // RFC 3339 time of the push
	Reason     string `json:"reason"`           // the op that triggered it, or "drain"
	Checkpoint string `json:"checkpoint,omitempty"`
	Chunks     int    `json:"chunks"` // distinct chunks the vault references
	Deleted    bool   `json:"deleted,omitempty"`
	// Seed marks a fork's first copy, pushed by its source's worker for
	// the fork's owner elsewhere (the owner's first push replaces it).
	Seed bool `json:"seed,omitempty"`
	// LogSeq is the sequence, in StreamLog, of the last change log entry
	// of the vault that the snapshot includes: a new owner applies the
	// entries after it (0: none, or a push from before the log).
	LogSeq uint64 `json:"log_seq,omitempty"`
	// Replication is the vault's replication mode when it was pushed
	// (sync, async, checkpoint): a new owner takes a checkpoint-mode
	// vault from the head alone, others from the head and the log.
	// Every change of mode pushes a snapshot.
	Replication string `json:"replication,omitempty"`
}

// ManifestObject names a manifest pushed for ns/vault; id makes each push
// a new object.
func ManifestObject(ns, vault, id string) string { return "vault/" + ns + "/" + vault + "/" + id }

// ChunkGCKey is the key in BucketChunks of the chunk GC state: whether a
// sweep is deleting, and how many sweeps deleted (worker/chunkgc.go). It
// is not a hex hash, so no chunk can take it.
const ChunkGCKey = "_gc"

// ChunkGCResult is what `avfs fleet gc` prints: what a sweep of
// BucketChunks found and removed.
type ChunkGCResult struct {
	DryRun bool `json:"dry_run"`
	// Manifests read for references, and the distinct chunks they name.
	Manifests  int `json:"manifests"`
	Referenced int `json:"referenced"`
	// Chunks in the bucket (and their bytes) when it was scanned.
	Chunks int   `json:"chunks"`
	Bytes  int64 `json:"bytes"`
	// Unreferenced chunks found; of them, Deleted were removed and
	// KeptYoung kept because a push wrote them since the sweep began.
	Unreferenced      int   `json:"unreferenced"`
	UnreferencedBytes int64 `json:"unreferenced_bytes"`
	Deleted           int   `json:"deleted"`
	DeletedBytes      int64 `json:"deleted_bytes"`
	KeptYoung         int   `json:"kept_young"`
	// Generation is the GC generation after the sweep (stores' sent
	// marks of earlier generations are not trusted).
	Generation uint64 `json:"generation"`
	DurationMS int64  `json:"duration_ms"`
}
