package transfer

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/messages"
)

func testBucket(t *testing.T) jetstream.JetStream {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateObjectStore(context.Background(), jetstream.ObjectStoreConfig{Bucket: messages.TransferBucket("t")}); err != nil {
		t.Fatal(err)
	}
	return js
}

// What Put stores, the object store library reads, and Open reads back
// whole and checked; a missing bucket, object or chunk, and a digest
// that does not match, are errors, not short content.
func TestPutOpen(t *testing.T) {
	ctx := context.Background()
	js := testBucket(t)
	b := messages.TransferBucket("t")
	data := make([]byte, 3*messages.TransferChunkSize+1)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	var seen int64
	ref, err := Put(ctx, js, b, "v/1", bytes.NewReader(data), func(n int64) { seen = n })
	if err != nil || ref.Size != int64(len(data)) || seen != ref.Size {
		t.Fatalf("put: %+v, progress %d, %v", ref, seen, err)
	}
	obs, _ := js.ObjectStore(ctx, b)
	lib, err := obs.GetBytes(ctx, "v/1")
	if err != nil || !bytes.Equal(lib, data) {
		t.Fatalf("the object store library reads %d bytes (%v)", len(lib), err)
	}
	r, err := Open(ctx, js, b, "v/1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) || r.Size() != int64(len(data)) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}

	if _, err := Open(ctx, js, b, "v/none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing object: %v", err)
	}
	if _, err := Open(ctx, js, messages.TransferBucket("other"), "v/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing bucket: %v", err)
	}

	// A meta message whose digest does not match the chunks.
	info, _ := obs.GetInfo(ctx, "v/1")
	info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(make([]byte, 32))
	m := nats.NewMsg("$O." + b + ".M." + base64.URLEncoding.EncodeToString([]byte("v/1")))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data, _ = json.Marshal(info)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	r, err = Open(ctx, js, b, "v/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err == nil {
		t.Fatal("content with the wrong digest read without an error")
	}

	// Chunks gone (expired, purged) in the middle.
	st, _ := js.Stream(ctx, Stream(b))
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("$O."+b+".C."+info.NUID)); err != nil {
		t.Fatal(err)
	}
	r, err = Open(ctx, js, b, "v/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, ErrNotFound) {
		t.Fatalf("chunks purged: %v", err)
	}
}
