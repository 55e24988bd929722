package messages

// Vault handoff between machines, by content hash, in two JetStream
// buckets:
//
//   - BucketChunks (KV): one content chunk (at most 64 KiB) per key, the
//     hex SHA-256 of its data. Written once (KV create), never changed:
//     any worker that needs the chunk reads it, and one that has it never
//     sends it again. A KV get is one round trip (direct get); an
//     object-store get sets up a consumer per object, which made fetching
//     a vault of small files ten times slower (BENCHMARKS.md).
//   - BucketVaults (object store), ManifestObject(ns, vault): the vault's
//     export without chunk data (one SQLite file: trees, checkpoints,
//     audit log, request log), with metadata ObjectMeta*. A deleted
//     vault's manifest is a tombstone: empty, with ObjectMetaDeleted set.
//
// The owner of a vault pushes it (the chunks the bucket lacks, then the
// manifest) after vault.create, vault.import, vault.fork (the target),
// checkpoint.save and checkpoint.restore, and for every vault changed
// since its last push when it stops gracefully; vault.delete pushes the
// tombstone. A fork placed on another worker is pushed before its reply.
//
// A worker about to serve a vault under an owner epoch it has not served
// it under yet compares its copy with the manifest: it takes the
// manifest (fetching only the chunks its store lacks) when it has no
// copy, or when the manifest came from another store at a later epoch
// than its copy's. So a vault reassigned from a dead worker is served
// from its last push: what a failover loses (the RPO) is every change
// after that push, unless the new owner shares the old one's store.
const (
	BucketVaults = "avfs_vaults" // object store: vault manifests
	BucketChunks = "avfs_chunks" // KV: <hex sha256> -> chunk data

	// Manifest metadata.
	ObjectMetaEpoch      = "avfs-epoch"      // owner epoch (BucketOwners) when pushed
	ObjectMetaStore      = "avfs-store"      // id of the store the copy was taken from
	ObjectMetaDeleted    = "avfs-deleted"    // "true" on a deleted vault's tombstone
	ObjectMetaCheckpoint = "avfs-checkpoint" // checkpoint whose op triggered the push, if any
	ObjectMetaTime       = "avfs-time"       // RFC 3339 time of the export
	ObjectMetaWorker     = "avfs-worker"     // the worker that pushed it
	ObjectMetaReason     = "avfs-reason"     // the op that triggered the push, or "drain"
	ObjectMetaChunks     = "avfs-chunks"     // how many distinct chunks the vault references
)

// ManifestObject is a vault's manifest's name in BucketVaults.
func ManifestObject(ns, vault string) string { return "vault/" + ns + "/" + vault }
