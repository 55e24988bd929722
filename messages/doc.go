// Package messages is the avfs wire contract: every request, reply,
// envelope and event type, the operation names, the NATS subject and header
// names, and the error codes. It imports no other package of avfs, so any
// client (Go, the nats CLI, Python) can be written against it and
// docs/ (cli.md, envelope.md, protocol.md) alone. Versioned: everything here is avfs.v1.
package messages
