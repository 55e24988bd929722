// Package handler executes avfs requests (messages.Request) against a
// vault store and returns replies (messages.Reply). It is the one
// implementation behind both the CLI's in-process mode and the fleet's
// workers, so a command gives the same result either way.
//
// It owns the mapping of vault errors to wire error codes.
package handler
