package owners

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
)

// Cache mirrors messages.BucketOwners.
type Cache struct {
	kv jetstream.KeyValue
	mu sync.RWMutex
	m  map[string]messages.Owner
}

// Watch starts a cache of kv that follows its changes until ctx ends. It
// returns once the bucket's current values are loaded. A watch that ends
// early (its consumer lost with a NATS server) is started again, so the
// cache never freezes silently.
func Watch(ctx context.Context, kv jetstream.KeyValue) (*Cache, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cache{kv: kv, m: map[string]messages.Owner{}}
	ready := make(chan struct{})
	go func() {
		loaded := false
		for {
			c.follow(ctx, w, func() {
				if !loaded {
					loaded = true
					close(ready)
				}
			})
			w.Stop()
			for {
				select {
				case <-ctx.Done():
					if !loaded {
						close(ready)
					}
					return
				case <-time.After(time.Second):
				}
				next, err := kv.WatchAll(ctx)
				if err == nil {
					w = next
					break
				}
			}
		}
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c, nil
}

// follow applies w's updates until it or ctx ends; loaded runs once the
// initial values are in.
func (c *Cache) follow(ctx context.Context, w jetstream.KeyWatcher, loaded func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				loaded()
				continue
			}
			c.apply(e)
		}
	}
}

func (c *Cache) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var o messages.Owner
	if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &o) == nil {
		c.m[e.Key()] = o
	} else {
		delete(c.m, e.Key())
	}
}

// Cached returns the owner of ns/vault as last seen by the watch.
func (c *Cache) Cached(ns, vault string) (messages.Owner, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	o, ok := c.m[messages.VaultKey(ns, vault)]
	return o, ok
}

// Get reads the owner of ns/vault from the bucket itself, for decisions
// the watch may not have caught up with yet; ok is false when the vault
// has no owner.
func (c *Cache) Get(ctx context.Context, ns, vault string) (o messages.Owner, ok bool, err error) {
	e, err := c.kv.Get(ctx, messages.VaultKey(ns, vault))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return o, false, nil
	}
	if err != nil {
		return o, false, fmt.Errorf("owner of %s/%s: %w", ns, vault, err)
	}
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		return o, false, fmt.Errorf("owner of %s/%s: %w", ns, vault, err)
	}
	return o, true, nil
}
