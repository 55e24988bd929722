// Package cli is the avfs command line (docs/cli.md, kept true by TestDocsContract): cobra commands that
// turn flags into messages.Requests, send them through a Client (in-process
// or a fleet), and print the reply as JSON or for a person.
//
// In-process, the Client is a node (node.Open: store, handler, exec
// pipeline), the same composition root a fleet worker is built from;
// `avfs serve` composes embedded NATS, a dispatcher and worker.Open, and
// `avfs worker` is worker.Open. The package links NATS because one call
// decides at run time whether a running `avfs serve` answers it.
package cli
