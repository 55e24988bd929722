package messages

// Vault handoff between machines. Each worker pushes a vault's export
// file (vault.Store.Export: one self-contained SQLite file) to the
// object store BucketVaults under ObjectName(ns, vault) after every
// vault.create, vault.import, vault.fork (the target), checkpoint.save
// and checkpoint.restore, and when it stops gracefully. A worker asked
// for a vault its store lacks imports the object first, so a vault
// reassigned from a dead worker is served from its last push: what a
// failover loses (the RPO) is every change after that push.
const (
	BucketVaults = "avfs_vaults" // object store: <ns>/<vault> -> export file

	// Object metadata of a pushed vault.
	ObjectMetaEpoch      = "avfs-epoch"      // owner epoch (BucketOwners) when pushed, if known
	ObjectMetaCheckpoint = "avfs-checkpoint" // checkpoint whose op triggered the push, if any
	ObjectMetaTime       = "avfs-time"       // RFC 3339 time of the export
	ObjectMetaWorker     = "avfs-worker"     // the worker that pushed it
	ObjectMetaReason     = "avfs-reason"     // the op that triggered the push, or "drain"
)

// ObjectName is a vault's object name in BucketVaults.
func ObjectName(ns, vault string) string { return ns + "/" + vault }
