package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// ifExpired is the sweep's vault.delete args.
const ifExpired = `{"if_expired":true}`

// defaultSweepEvery is how often a worker looks for expired vaults
// (ServeOptions.SweepEvery).
const defaultSweepEvery = 5 * time.Second

// sweepExpired deletes the vaults this worker owns whose expiry (a fork
// made with a TTL) passed, until ctx ends. It sends each delete through
// the fleet like any client, so that the delete is ordered with the
// vault's other requests and its tombstone reaches the object store
// (afterDelete): a copy elsewhere cannot bring the vault back. The
// request id is derived from the vault and its expiry, so a delete sent
// again (the next sweep, another worker that took the vault over) has one
// effect.
func (s *Server) sweepExpired(ctx context.Context) {
	c, err := client.New(s.nc) // (not closed: Close would close s.nc)
	if err != nil {
		s.log.Warn("expiry sweep disabled", telemetry.LogKeyErr, err)
		return
	}
	everyTick(ctx, s.o.SweepEvery, func() { s.sweepOnce(ctx, c) })
}

func (s *Server) sweepOnce(ctx context.Context, c *client.Client) {
	ex, err := s.store.Expired(ctx)
	if err != nil {
		s.log.Warn("expiry sweep", telemetry.LogKeyErr, err)
		return
	}
	for _, e := range ex {
		if o, ok := s.owned.Cached(e.Namespace, e.Name); !ok || o.Worker != s.id {
			continue // a stale copy, or not placed yet: its owner sweeps it
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		// The delete re-checks the expiry when its turn comes: the vault's
		// TTL may be changed, or the name deleted and made again, before.
		rep, err := c.Do(rctx, messages.Request{Op: messages.OpVaultDelete, Namespace: e.Namespace, Vault: e.Name, Actor: "ttl",
			RequestID: fmt.Sprintf("expire-%s-%s-%d", e.Namespace, e.Name, e.ExpiresAt.UnixNano()), Args: json.RawMessage(ifExpired)})
		cancel()
		switch {
		case err != nil:
			s.log.Warn("expiry sweep: delete", telemetry.LogKeyVault, e.Name, telemetry.LogKeyErr, err)
		case rep.Error != nil && rep.Error.Code == messages.CodeConflict:
			s.log.Info("expiry sweep: vault no longer expired", telemetry.LogKeyNamespace, e.Namespace, telemetry.LogKeyVault, e.Name)
		case rep.Error != nil && rep.Error.Code != messages.CodeVaultNotFound:
			s.log.Warn("expiry sweep: delete", telemetry.LogKeyVault, e.Name, telemetry.LogKeyErr, rep.Error)
		default:
			s.log.Info("expired vault deleted", telemetry.LogKeyNamespace, e.Namespace, telemetry.LogKeyVault, e.Name, "expired_at", e.ExpiresAt)
		}
	}
}
