// Package embedded runs an in-process nats-server with JetStream, the
// engine behind `avfs serve` and the end-to-end tests, and creates the
// streams and buckets the fleet needs (also used against an external
// deployment by `avfs worker` and `avfs dispatcher`).
//
// It sits at the top of the module with the other fleet packages
// (dispatcher, worker, owners): the CLI's fleet commands and the e2e
// fixtures use it; internal/ keeps only helpers no layer is built on.
package embedded
