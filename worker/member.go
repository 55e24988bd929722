package worker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/node"
)

// Options configure a fleet member: its node (store, handler, exec
// pipeline) and the server around it.
type Options struct {
	Node  node.Options
	Serve ServeOptions
}

// Member is a fleet member: a node (node.Open) and the worker server
// that serves it to the fleet. `avfs serve`, `avfs worker` and the e2e
// fixtures start workers this way.
type Member struct {
	node *node.Node
	srv  *Server
}

// Open opens a node with o.Node (Serving set) and a server for it on nc.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Member, error) {
	o.Node.Serving = true
	if o.Node.Worker == "" {
		o.Node.Worker = o.Serve.ID
	}
	n, err := node.Open(ctx, o.Node)
	if err != nil {
		return nil, err
	}
	srv, err := NewServer(nc, n, o.Serve)
	if err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return &Member{node: n, srv: srv}, nil
}

// Run serves until ctx ends, then stops taking work, finishes what it
// started, hands its vaults on and returns (Server.Run).
func (m *Member) Run(ctx context.Context) error { return m.srv.Run(ctx) }

// Node is the member's node.
func (m *Member) Node() *node.Node { return m.node }

// Close closes the node; call it after Run returned.
func (m *Member) Close() error { return m.node.Close() }
