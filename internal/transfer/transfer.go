// Package transfer moves content too large for one NATS message through
// a namespace's transfer bucket (messages.TransferBucket), the one way
// the fleet's client and workers both use.
//
// Objects are written and read here in the object store's format (so
// that any object store client can read and write them too), written
// with a bounded window of unacknowledged chunks and read a chunk at a
// time with JetStream direct gets: no consumer is created, so
// a reader needs no right to create consumers (which would let a tenant
// make the server deliver messages on subjects of its choosing), memory
// stays at one chunk whatever the object's size, and a read that fails
// in the middle resumes at the chunk it stopped at.
package transfer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
)

// ErrNotFound means the bucket or the object does not exist (deleted,
// expired after messages.TransferTTL, or never put).
var ErrNotFound = errors.New("transfer object not found")

// Stream is the JetStream stream behind bucket b.
func Stream(b string) string { return "OBJ_" + b }

// Bucket opens the transfer bucket of namespace ns; ErrNotFound if it
// does not exist.
func Bucket(ctx context.Context, js jetstream.JetStream, ns string) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, messages.TransferBucket(ns))
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("bucket %s: %w", messages.TransferBucket(ns), ErrNotFound)
	}
	return obs, err
}

// window is how many chunks a Put has unacknowledged: chunks not yet
// stored wait in the NATS server's memory, and the object store's own
// Put allows 4,000 in flight (2 GB of 512 KiB chunks; a 1 GiB upload
// grew the server by 150 MB and timed out waiting for acks).
const window = 8

// Put stores what r yields as object name of bucket b, in chunks of
// messages.TransferChunkSize, in the object store's format, with at
// most window chunks in flight; progress, if set, is told the bytes read
// so far. A failed Put purges the chunks it sent.
func Put(ctx context.Context, js jetstream.JetStream, b, name string, r io.Reader, progress func(int64)) (messages.ObjectRef, error) {
	var id [12]byte
	rand.Read(id[:])
	info := jetstream.ObjectInfo{Bucket: b, NUID: hex.EncodeToString(id[:]),
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: messages.TransferChunkSize}}}
	chunkSubj := "$O." + b + ".C." + info.NUID
	ref, err := put(ctx, js, &info, chunkSubj, r, progress)
	if err != nil {
		if st, serr := js.Stream(context.WithoutCancel(ctx), Stream(b)); serr == nil {
			st.Purge(context.WithoutCancel(ctx), jetstream.WithPurgeSubject(chunkSubj))
		}
		return ref, fmt.Errorf("put %s: %w", name, err)
	}
	return ref, nil
}

func put(ctx context.Context, js jetstream.JetStream, info *jetstream.ObjectInfo, chunkSubj string, r io.Reader, progress func(int64)) (messages.ObjectRef, error) {
	sum := sha256.New()
	buf := make([]byte, messages.TransferChunkSize)
	var inflight []jetstream.PubAckFuture
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			m := nats.NewMsg(chunkSubj)
			m.Data = buf[:n] // copied into the connection's buffer by the publish
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				return messages.ObjectRef{}, err
			}
			sum.Write(buf[:n])
			info.Size += uint64(n)
			info.Chunks++
			if progress != nil {
				progress(int64(info.Size))
			}
			if inflight = append(inflight, f); len(inflight) >= window {
				if err := wait(inflight[0]); err != nil {
					return messages.ObjectRef{}, err
				}
				inflight = inflight[1:]
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return messages.ObjectRef{}, rerr
		}
	}
	for _, f := range inflight {
		if err := wait(f); err != nil {
			return messages.ObjectRef{}, err
		}
	}
	info.Digest = jetstream.GetObjectDigestValue(sum)
	info.ModTime = time.Now().UTC()
	data, err := json.Marshal(info)
	if err != nil {
		return messages.ObjectRef{}, err
	}
	mm := nats.NewMsg("$O." + info.Bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(info.Name)))
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	mm.Data = data
	if _, err := js.PublishMsg(ctx, mm); err != nil {
		return messages.ObjectRef{}, err
	}
	return messages.ObjectRef{Bucket: info.Bucket, Name: info.Name, Size: int64(info.Size), Digest: info.Digest}, nil
}

// Reader reads one object. At EOF it has checked the content against
// the object's digest.
type Reader struct {
	ctx    context.Context
	stream jetstream.Stream
	subj   string // the object's chunk subject
	next   uint64 // the stream sequence to look from
	left   int64  // bytes not yet fetched
	buf    []byte
	sum    hash.Hash
	want   string
	info   *jetstream.ObjectInfo
}

// Open returns a reader of object name of bucket b.
func Open(ctx context.Context, js jetstream.JetStream, b, name string) (*Reader, error) {
	obs, err := js.ObjectStore(ctx, b)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("bucket %s: %w", b, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	info, err := obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("object %s of %s: %w", name, b, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", name, err)
	}
	st, err := js.Stream(ctx, Stream(b))
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", name, err)
	}
	return &Reader{ctx: ctx, stream: st, subj: "$O." + b + ".C." + info.NUID, next: 1, left: int64(info.Size),
		sum: sha256.New(), want: info.Digest, info: info}, nil
}

// Size is the object's size in bytes.
func (r *Reader) Size() int64 { return int64(r.info.Size) }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.left <= 0 {
			got := "SHA-256=" + base64.URLEncoding.EncodeToString(r.sum.Sum(nil))
			if got != r.want {
				return 0, fmt.Errorf("object %s: digest %s, want %s", r.info.Name, got, r.want)
			}
			return 0, io.EOF
		}
		if err := r.fetch(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// fetch gets the next chunk, retrying a few times: a lost reply or a
// reconnect costs a retry of one chunk, not the whole object.
func (r *Reader) fetch() error {
	var err error
	for try := 0; try < 5; try++ {
		if try > 0 {
			select {
			case <-r.ctx.Done():
				return r.ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			}
		}
		var m *jetstream.RawStreamMsg
		m, err = r.stream.GetMsg(r.ctx, r.next, jetstream.WithGetMsgSubject(r.subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("object %s: chunk missing after %d bytes (expired or deleted): %w", r.info.Name, int64(r.info.Size)-r.left, ErrNotFound)
		}
		if err == nil {
			r.next = m.Sequence + 1
			r.buf = m.Data
			r.left -= int64(len(m.Data))
			r.sum.Write(m.Data)
			return nil
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
	}
	return fmt.Errorf("object %s: %w", r.info.Name, err)
}

// Close implements io.Closer.
func (r *Reader) Close() error { return nil }
