// Package owners keeps a process's view of vault ownership (the fleet's
// messages.BucketOwners) current through a KV watch, so that routing and
// fencing decisions cost no KV round trip. Changes to ownership still go
// through compare-and-set on the bucket; this is a read cache, keyed by
// messages.VaultKey. (Only the dispatcher, which routes, and the worker,
// which fences, read it; clients learn owners from reply headers.)
package owners
