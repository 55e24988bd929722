// Command schemagen writes the JSON Schema (draft 2020-12) files of the
// avfs wire contract from the Go types of package messages, so that
// clients in other languages validate against exactly what the Go code
// encodes:
//
//	go run ./internal/schemagen -out docs/schema -doc docs/protocol.md
//
// It reads the types with reflect (json tags decide names; a field without
// omitempty is required; []byte is a base64 string; pointers, slices and
// maps are nullable because encoding/json writes nil ones as null) and the
// doc comments of package messages with go/parser, which become
// descriptions. Every op is mapped to its args and result type in the
// table in ops.go; the tests fail when an Op constant of package messages
// is missing from it, and when the committed files under docs/schema, or
// the generated op table in docs/protocol.md, differ from what this
// program produces now.
//
// Args schemas are closed (additionalProperties: false) because the
// handler decodes args with DisallowUnknownFields; results, envelopes and
// replies are open, since fields may be added (docs/envelope.md).
package main
