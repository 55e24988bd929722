// Package cli is the avfs command line (docs/cli.md, kept true by TestDocsContract): cobra commands that
// turn flags into messages.Requests, send them through a Client (in-process
// or a fleet), and print the reply as JSON or for a person.
package cli
