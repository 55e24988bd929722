package cli

import (
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// validRequestID is what --request-id accepts: it travels in NATS
// headers, deduplication ids and run ids, so no spaces, no control
// characters, no wildcards: ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$, written
// out (compiling that expression at package init cost every command a
// few hundred µs).
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || i > 0 && strings.IndexByte("._:-", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// setRequestID reads --request-id, else AVFS_REQUEST_ID. A bad id is a
// usage error: nothing is sent.
func (a *app) setRequestID(cmd *cobra.Command) error {
	id, _ := cmd.Flags().GetString("request-id")
	from := "--request-id"
	if !cmd.Flags().Changed("request-id") {
		id, from = os.Getenv("AVFS_REQUEST_ID"), "AVFS_REQUEST_ID"
	}
	if id != "" && !validRequestID(id) {
		return usagef("%s %q: want 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", from, id)
	}
	a.requestID = id
	return nil
}

// requestIDFor is the request id of the next request, of op. Without
// --request-id every request gets a fresh id. With one, the command's
// first mutating request carries it as given and its n-th (n >= 2)
// carries ID.n, so running the same command again with the same id sends
// the same ids in the same order and each is answered from the vault's
// request log (docs/decisions.md §2) instead of applied again. Reads are
// never logged; they get fresh ids.
func (a *app) requestIDFor(op messages.Op) string {
	if a.requestID == "" || !op.Mutating() {
		return client.NewRequestID()
	}
	a.clientMu.Lock()
	defer a.clientMu.Unlock()
	a.mutations++
	if a.mutations == 1 {
		return a.requestID
	}
	return a.requestID + "." + strconv.Itoa(a.mutations)
}
