// Package e2e holds end-to-end tests of the fleet: an embedded nats-server
// with JetStream (store in t.TempDir()), real dispatchers and workers with
// real SQLite stores and FUSE mounts, driven through the Go client.
package e2e
