package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
)

// Options configure an embedded server.
type Options struct {
	// Listen is host:port for clients; "" listens on a random loopback
	// port, so that CLIs on the same machine can reach it and nothing
	// else can. Port 0 is a free port the system picks.
	Listen   string
	StoreDir string // JetStream storage
}

// Start runs a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	host, port := "127.0.0.1", -1
	if o.Listen != "" {
		h, p, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen %q: %w", o.Listen, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("listen %q: %w", o.Listen, err)
		}
		if port == 0 {
			port = -1 // :0 is any free port, as for net.Listen; nats-server reads 0 as 4222
		}
		host = h
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "avfs", Host: host, Port: port, JetStream: true, StoreDir: o.StoreDir,
		NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats server did not start in 10s")
	}
	return ns, nil
}

// Topology says how durable the fleet's streams are and how much they
// keep. Zero fields take the defaults below.
type Topology struct {
	Replicas int // 1 on one server, 3 on a cluster
	// MaxRequestBytes caps one message of the intake, work and
	// dead-letter streams: a bigger request is refused at publish.
	MaxRequestBytes int32
	// DLQMaxBytes and DLQMaxAge bound the dead-letter stream; the oldest
	// dead letters go first.
	DLQMaxBytes int64
	DLQMaxAge   time.Duration
	// MemberTTL is the members bucket's TTL (config fleet.member_ttl):
	// a worker is gone this long after its last heartbeat. Default
	// messages.MemberTTL.
	MemberTTL time.Duration
}

// Topology defaults (docs/protocol.md, "Limits").
const (
	DefaultMaxRequestBytes = 8 << 20   // the max_payload of `avfs serve`
	DefaultDLQMaxBytes     = 256 << 20 // 256 MiB
	DefaultDLQMaxAge       = 7 * 24 * time.Hour
)

// Setup creates (or updates) the fleet's streams and buckets. It is
// idempotent: every process that joins calls it.
func Setup(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if t.Replicas == 0 {
		t.Replicas = 1
	}
	if t.MaxRequestBytes <= 0 {
		t.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if t.DLQMaxBytes <= 0 {
		t.DLQMaxBytes = DefaultDLQMaxBytes
	}
	if t.DLQMaxAge <= 0 {
		t.DLQMaxAge = DefaultDLQMaxAge
	}
	if t.MemberTTL <= 0 {
		t.MemberTTL = messages.MemberTTL
	}
	streams := []jetstream.StreamConfig{
		{Name: messages.StreamRequests, Subjects: []string{messages.SubjectRequest + ".>"}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: 2 * time.Minute, Replicas: t.Replicas, Storage: jetstream.FileStorage, MaxMsgSize: t.MaxRequestBytes},
		{Name: messages.StreamWork, Subjects: []string{messages.SubjectWork + ".>"}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: 2 * time.Minute, Replicas: t.Replicas, Storage: jetstream.FileStorage, MaxMsgSize: t.MaxRequestBytes},
		// Dead letters stay until an operator replays or drops them, or
		// the limits push the oldest out: no sender can fill the disk.
		{Name: messages.StreamDLQ, Subjects: []string{messages.SubjectDLQ + ".>"}, Retention: jetstream.LimitsPolicy,
			Replicas: t.Replicas, Storage: jetstream.FileStorage, MaxMsgSize: t.MaxRequestBytes,
			MaxBytes: t.DLQMaxBytes, MaxAge: t.DLQMaxAge, Discard: jetstream.DiscardOld},
		// Every vault's change log (messages/replog.go): limits
		// retention, trimmed per vault by its owner once a snapshot holds
		// the entries; an entry is at most a request and its result.
		{Name: messages.StreamLog, Subjects: []string{messages.SubjectLog + ".>"}, Retention: jetstream.LimitsPolicy,
			Replicas: t.Replicas, Storage: jetstream.FileStorage, MaxMsgSize: 2 * t.MaxRequestBytes},
		// Audit events for operators to follow: kept by age, deduplicated
		// by Nats-Msg-Id = <worker>-<store audit id>.
		{Name: messages.StreamAudit, Subjects: []string{messages.SubjectAudit + ".>"}, Retention: jetstream.LimitsPolicy,
			MaxAge: messages.AuditMaxAge, Duplicates: 2 * time.Minute, Replicas: t.Replicas, Storage: jetstream.FileStorage},
	}
	for _, sc := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: messages.BucketMembers, TTL: t.MemberTTL, Replicas: t.Replicas}); err != nil {
		return fmt.Errorf("bucket %s: %w", messages.BucketMembers, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: messages.BucketOwners, Replicas: t.Replicas}); err != nil {
		return fmt.Errorf("bucket %s: %w", messages.BucketOwners, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: messages.BucketAttempts, TTL: time.Hour, Replicas: t.Replicas}); err != nil {
		return fmt.Errorf("bucket %s: %w", messages.BucketAttempts, err)
	}
	// The catalogs the dispatcher answers namespace ops from
	// (messages/subjects.go): kept until their owner changes them.
	for _, b := range []string{messages.BucketCatalog, messages.BucketApprovals} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, Replicas: t.Replicas, Storage: jetstream.FileStorage}); err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	// Vault manifests and content chunks, for moving vaults between
	// machines (worker handoff, messages/handoff.go).
	for _, b := range []string{messages.BucketChunks, messages.BucketHeads} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, Replicas: t.Replicas, Storage: jetstream.FileStorage}); err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: messages.BucketVaults, Replicas: t.Replicas, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("object store %s: %w", messages.BucketVaults, err)
	}
	return nil
}
