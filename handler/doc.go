// Package handler executes avfs requests (messages.Request) against a
// vault store and returns replies (messages.Reply). It is the one
// implementation behind both the CLI's in-process mode and the fleet's
// workers, so a command gives the same result either way.
//
// A request is decoded once and encoded once, at the wire edge (Reply):
// Decode checks the op, namespace and vault name and decodes the args
// into the op's type (a Call); the core (Handler.Serve, the Core
// interface) takes typed args and returns the op's typed result, by
// value; the edge encodes it. The layers around the core are wrappers
// that hold the next Core (Wrap adds the request metrics and the fleet's
// reply size limit; package worker adds handoff, catalogs and the
// rest), never accessors that reach through it.
//
// It owns the mapping of vault errors to wire error codes.
package handler
