package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/transfer"
	"github.com/avfs/avfs/messages"
)

// Content too large for one message travels through the transfer
// bucket of the request's namespace (docs/protocol.md, "Transfers"):
// the client uploads it and names the object in its request, or the
// worker answers with an object the client downloads and deletes. The
// client reads and writes the bucket itself, so the content never passes
// through a path on the worker's machine.

// requestRoom is what a request needs besides its body: headers.
const requestRoom = 8 << 10

// MaxRequest is the largest request body this connection can send.
func (c *Client) MaxRequest() int { return int(c.nc.MaxPayload()) - requestRoom }

// MaxInline is the most content bytes a file.write carries inline
// (base64 in JSON grows content by 4/3); more goes through Upload.
func (c *Client) MaxInline() int { return c.MaxRequest()*3/4 - 4<<10 }

type intakeKey struct{}

// ViaIntake marks ctx so that Do sends its request through the intake,
// never directly: requests that move a transfer object can outlast a
// direct attempt's timeout.
func ViaIntake(ctx context.Context) context.Context { return context.WithValue(ctx, intakeKey{}, true) }

func viaIntake(ctx context.Context) bool { b, _ := ctx.Value(intakeKey{}).(bool); return b }

// bucket returns ns's transfer bucket, asking the fleet to create it
// when it does not exist yet.
func (c *Client) bucket(ctx context.Context, ns string) (jetstream.ObjectStore, error) {
	obs, err := transfer.Bucket(ctx, c.js, ns)
	if !errors.Is(err, transfer.ErrNotFound) {
		return obs, err
	}
	if err := c.Call(ctx, ns, "", messages.OpTransferOpen, nil, nil); err != nil {
		return nil, err
	}
	return transfer.Bucket(ctx, c.js, ns)
}

// Upload puts what r yields in ns's transfer bucket as an object of
// vault and returns its name, for WriteArgs.ContentObject or
// VaultTransferArgs.Object. The worker deletes it once it used it;
// left unused, it expires after messages.TransferTTL. progress, if set,
// is told the bytes sent so far.
func (c *Client) Upload(ctx context.Context, ns, vault string, r io.Reader, progress func(int64)) (string, error) {
	if _, err := c.bucket(ctx, ns); err != nil {
		return "", err
	}
	name := messages.TransferObject(vault, NewRequestID())
	if _, err := transfer.Put(ctx, c.js, messages.TransferBucket(ns), name, r, progress); err != nil {
		return "", fmt.Errorf("%w: upload: %v", ErrUnavailable, err)
	}
	return name, nil
}

// Download copies the object ref names (from ns's transfer bucket) to w,
// checking its digest, then deletes it. progress, if set, is told the
// bytes received so far.
func (c *Client) Download(ctx context.Context, ns string, ref messages.ObjectRef, w io.Writer, progress func(int64)) error {
	if ref.Bucket != messages.TransferBucket(ns) {
		return fmt.Errorf("object %s is in bucket %s, not namespace %s's", ref.Name, ref.Bucket, ns)
	}
	r, err := transfer.Open(ctx, c.js, ref.Bucket, ref.Name)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	var n int64
	buf := make([]byte, messages.TransferChunkSize)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return werr
			}
			n += int64(k)
			if progress != nil {
				progress(n)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("download: %w", err)
		}
	}
	if obs, err := transfer.Bucket(ctx, c.js, ns); err == nil {
		obs.Delete(ctx, ref.Name) // else it expires
	}
	return nil
}

// tooLarge refuses a request no fleet message can carry, at once:
// sending it again can never succeed.
func tooLarge(req messages.Request, n, max int) *messages.Error {
	e := messages.Errorf(messages.CodeInvalidArgument, "%s request of %d bytes exceeds the largest message of this NATS connection (%d bytes); large file content goes through the transfer bucket (client.Upload)", req.Op, n, max)
	e.Details = map[string]any{"size": n, "max_request": max}
	return e
}
