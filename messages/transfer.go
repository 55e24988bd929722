package messages

import "time"

// Transfers: content too large for one NATS message (a big file.write or
// file.cat, vault.export and vault.import through a fleet) travels
// through an object store bucket of the request's namespace, never
// through a path on the worker's machine. One bucket per namespace, so
// that NATS permissions on its stream confine a tenant to its own
// objects (docs/decisions.md §11).
const (
	// TransferBucketPrefix + namespace is a namespace's transfer bucket.
	TransferBucketPrefix = "avfs_xfer_"
	// TransferTTL is how long an object stays in a transfer bucket;
	// whatever a transfer leaves behind expires after it.
	TransferTTL = time.Hour
	// TransferMaxBytes caps a namespace's transfer bucket, so that no
	// tenant can fill the fleet's disk through it.
	TransferMaxBytes = 8 << 30
	// TransferChunkSize is the object store chunk size transfers use:
	// well under the 1 MiB default NATS payload limit.
	TransferChunkSize = 512 << 10
)

// TransferBucket is namespace ns's transfer bucket.
func TransferBucket(ns string) string { return TransferBucketPrefix + ns }

// TransferObject is a valid object name for vault v of a transfer
// bucket: "<vault>/<id>" (the CLI and the worker use the request id).
func TransferObject(v, id string) string { return v + "/" + id }
