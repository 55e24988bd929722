package worker

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
)

// publishOutput returns the OutputFunc that publishes a request's output
// to the caller's inbox (messages.HeaderOutputTo) as OutputChunk
// messages numbered from 1. Core NATS keeps one publisher's messages in
// order, and the Reply goes out on the same connection after the last
// chunk, so a caller subscribed to both sees every chunk before it.
func publishOutput(nc *nats.Conn, to string, req messages.Request, attempt int) runner.OutputFunc {
	var mu sync.Mutex
	var seq int64
	return func(stream string, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		seq++
		b, err := json.Marshal(messages.OutputChunk{Seq: seq, Stream: stream, Data: p, RequestID: req.RequestID, Attempt: attempt})
		if err != nil {
			return
		}
		// Best effort: the envelope is the record; a lost chunk shows as
		// a gap in seq.
		_ = nc.Publish(to, b)
	}
}
