// Package owners keeps a process's view of vault ownership (the fleet's
// messages.BucketOwners) current through a KV watch, so that routing and
// fencing decisions cost no KV round trip. Changes to ownership still go
// through compare-and-set on the bucket; this is a read cache.
package owners
