package worker

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/internal/transfer"
	"github.com/avfs/avfs/messages"
)

// objects is the worker's side of transfers (handler.Objects): large
// content comes from and goes to the transfer bucket of the request's
// namespace, created here on first use with the fleet's limits.
type objects struct {
	js jetstream.JetStream
	mu sync.Mutex
	bs map[string]jetstream.ObjectStore // namespace -> its bucket
}

// replyRoom is what a reply needs besides its result: the request id,
// the JSON around the result, headers.
const replyRoom = 16 << 10

// useObjects makes s's handler a fleet handler (no host paths, large
// content through transfer buckets) and serves transfer.open.
func (s *Server) useObjects() {
	o := &objects{js: s.js, bs: map[string]jetstream.ObjectStore{}}
	s.h.UseObjects(o, int(s.nc.MaxPayload())-replyRoom)
	handler.Register(s.h, messages.OpTransferOpen, func(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
		if _, err := o.bucket(ctx, req.Namespace); err != nil {
			return nil, err
		}
		return messages.TransferOpenResult{Bucket: messages.TransferBucket(req.Namespace), MaxBytes: messages.TransferMaxBytes,
			TTLSeconds: int64(messages.TransferTTL.Seconds())}, nil
	})
}

// bucket returns ns's transfer bucket, creating it if needed, with as
// many replicas as the fleet's own vault bucket.
func (o *objects) bucket(ctx context.Context, ns string) (jetstream.ObjectStore, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b, ok := o.bs[ns]; ok {
		return b, nil
	}
	b, err := transfer.Bucket(ctx, o.js, ns)
	if errors.Is(err, transfer.ErrNotFound) {
		replicas := 1
		if vs, err := o.js.ObjectStore(ctx, messages.BucketVaults); err == nil {
			if st, err := vs.Status(ctx); err == nil && st.Replicas() > 0 {
				replicas = st.Replicas()
			}
		}
		b, err = o.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: messages.TransferBucket(ns), Description: "avfs transfers of namespace " + ns,
			TTL: messages.TransferTTL, MaxBytes: messages.TransferMaxBytes, Storage: jetstream.FileStorage, Replicas: replicas,
		})
	}
	if err != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "transfer bucket of namespace %q: %v", ns, err)
	}
	o.bs[ns] = b
	return b, nil
}

func (o *objects) Open(ctx context.Context, ns, name string) (io.ReadCloser, error) {
	r, err := transfer.Open(ctx, o.js, messages.TransferBucket(ns), name)
	if errors.Is(err, transfer.ErrNotFound) {
		return nil, messages.Errorf(messages.CodeNotFound, "%v", err)
	}
	return r, err
}

func (o *objects) Put(ctx context.Context, ns, name string, r io.Reader) (messages.ObjectRef, error) {
	if _, err := o.bucket(ctx, ns); err != nil {
		return messages.ObjectRef{}, err
	}
	return transfer.Put(ctx, o.js, messages.TransferBucket(ns), name, r, nil)
}

func (o *objects) Delete(ctx context.Context, ns, name string) error {
	b, err := o.bucket(ctx, ns)
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
}
