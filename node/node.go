package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Options configure a node.
type Options struct {
	// Config is the process's configuration: its home (store, mounts,
	// runs), store, exec, policy and approval settings. Required.
	Config *config.Config
	// Store, when set, is an open store to serve instead of opening
	// Config.StorePath(); the node leaves it open at Close (tests that
	// run two workers over one store, one machine).
	Store *vault.Store
	// Worker is the id recorded as the owner of vaults the node creates
	// and reported in envelopes; default "local" (in-process).
	Worker string
	Logger *slog.Logger
	Tracer trace.TracerProvider // nil: no tracing
	Meter  metric.MeterProvider // nil: no metrics
	// Serving says the node serves requests until stopped (a fleet
	// worker), not one command line: sandbox inits are kept alive
	// between commands.
	Serving bool
	// SweepExpired deletes the store's expired vaults at Open: a process
	// serving in-process owns every vault of its store. A fleet worker
	// leaves it off (the fleet sweeps the vaults each worker owns).
	SweepExpired bool
}

// Node owns a store, the handler serving it and the exec pipeline
// registered on that handler.
type Node struct {
	o        Options
	store    *vault.Store
	ownStore bool
	h        *handler.Handler
	unwire   func() error
	// mountSync is the hook SetMountSync installed, nil until then.
	mountSync atomic.Pointer[func(ctx context.Context, ns, vault string) error]
}

// StoreOptions are the vault store's options from c.
func StoreOptions(c *config.Config) vault.Options {
	return vault.Options{Synchronous: c.Store.Synchronous, MaxFileSize: c.Store.MaxFileSize,
		Defaults: vault.Defaults{AutoKeep: c.Checkpoints.AutoKeep, AutoMaxAge: c.Checkpoints.AutoMaxAge, QuotaMode: c.Quota.Mode, Replication: c.Replication}}
}

// Open builds a node: the store (unless o.Store hands one in), the
// handler, and the runner registered on it. A store that cannot be
// opened is UNAVAILABLE.
func Open(ctx context.Context, o Options) (*Node, error) {
	if o.Config == nil {
		return nil, errors.New("node: no config")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Worker == "" {
		o.Worker = "local"
	}
	n := &Node{o: o, store: o.Store}
	if n.store == nil {
		st, err := vault.Open(ctx, o.Config.StorePath(), StoreOptions(o.Config))
		if err != nil {
			return nil, messages.Errorf(messages.CodeUnavailable, "open store: %v", err)
		}
		n.store, n.ownStore = st, true
	}
	if o.SweepExpired {
		if gone, err := n.store.SweepExpired(ctx, nil); err != nil {
			o.Logger.Warn("expiry sweep", telemetry.LogKeyErr, err)
		} else if len(gone) > 0 {
			o.Logger.Info("expired vaults deleted", "vaults", gone)
		}
	}
	n.h = handler.New(n.store, handler.Options{Worker: o.Worker, Logger: o.Logger, Tracer: o.Tracer, Meter: o.Meter})
	unwire, err := runner.Wire(o.Config, runner.Parts{Store: n.store, Handler: n.h, Worker: o.Worker, Logger: o.Logger,
		Tracer: o.Tracer, Meter: o.Meter, Serving: o.Serving, MountSync: n.syncMount})
	if err != nil {
		n.closeStore()
		return nil, fmt.Errorf("set up the exec pipeline: %w", err)
	}
	n.unwire = unwire
	return n, nil
}

// SetMountSync makes f run after every fsync through a mount asked for
// with mount.start has committed to the store, before the fsync returns
// (runner.Parts.MountSync): a fleet worker holds what it committed. Its
// error fails the fsync with EIO. Set it before serving mount.start.
func (n *Node) SetMountSync(f func(ctx context.Context, ns, vault string) error) {
	n.mountSync.Store(&f)
}

func (n *Node) syncMount(ctx context.Context, ns, vault string) error {
	if f := n.mountSync.Load(); f != nil && *f != nil {
		return (*f)(ctx, ns, vault)
	}
	return nil
}

// Handle serves one request in-process: the wire edge of the handler
// (decoded once, encoded once), with no fleet around it.
func (n *Node) Handle(ctx context.Context, req messages.Request) messages.Reply {
	return n.h.Handle(ctx, req)
}

// Handler is the node's handler, for the layer composed around the node
// (a fleet member wraps its core and registers its own ops on it).
func (n *Node) Handler() *handler.Handler { return n.h }

// Store is the node's store, for the layer composed around the node.
func (n *Node) Store() *vault.Store { return n.store }

// ID is the node's worker id.
func (n *Node) ID() string { return n.o.Worker }

// Tracer and Meter are the providers the node was opened with (nil:
// none), for the layer composed around it.
func (n *Node) Tracer() trace.TracerProvider { return n.o.Tracer }

// Meter: see Tracer.
func (n *Node) Meter() metric.MeterProvider { return n.o.Meter }

// Logger is the node's logger, never nil.
func (n *Node) Logger() *slog.Logger { return n.o.Logger }

// Close ends the exec pipeline (background runs, mounts), then closes the
// store if the node opened it.
func (n *Node) Close() error {
	var err error
	if n.unwire != nil {
		err = n.unwire()
		n.unwire = nil
	}
	return errors.Join(err, n.closeStore())
}

func (n *Node) closeStore() error {
	if !n.ownStore || n.store == nil {
		return nil
	}
	st := n.store
	n.store = nil
	return st.Close()
}
