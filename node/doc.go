// Package node is the composition root of a process that serves vaults:
// Open builds, in one place and in one order, the vault store, the
// request handler and the exec pipeline (runner, with its mounts)
// registered on it; Close takes them down in the reverse order. The
// CLI's in-process mode, `avfs serve`, `avfs worker` and every e2e
// fixture get their parts from Open, so the tests exercise the wiring
// production uses.
//
// A node links no NATS package: in-process it serves requests itself
// (Handle). A fleet member is a node with a worker.Server around it
// (worker.Open), composed by package worker, which depends on node, never
// the reverse.
//
// Invariants: a node closes what it opened and nothing else (a store
// handed in through Options.Store stays open); Close unmounts before the
// store closes. Node has no locks of its own.
package node
