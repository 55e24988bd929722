package e2e

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// TestHistoryAndSettingsTravelWithAVault: a vault whose worker stops
// (SIGTERM) is served by a worker with its own store, and keeps its file
// history, its settings and its expiry there; the maintenance ops work
// through the fleet on the owner's store.
func TestHistoryAndSettingsTravelWithAVault(t *testing.T) {
	f := startFleet(t)
	w1 := f.startWorkerProcess(t.TempDir(), "t1")
	f.waitMembers("t1")
	c := f.client()
	ctx := context.Background()
	call := func(v string, op messages.Op, args, out any) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := c.Call(cctx, "default", v, op, args, out); err != nil {
			t.Fatalf("%s %s: %v", op, v, err)
		}
	}
	call("hv", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
	for _, s := range []string{"one\n", "two\n", "three\n"} {
		call("hv", messages.OpWrite, messages.WriteArgs{Path: "/f.txt", Content: []byte(s)}, nil)
	}
	call("hv", messages.OpVaultSet, messages.VaultSetArgs{Key: "auto_keep", Value: "2"}, nil)
	call("hv", messages.OpVaultSet, messages.VaultSetArgs{Key: "quota_mode", Value: "unique"}, nil)
	var fr messages.ForkResult
	call("hv", messages.OpVaultFork, messages.VaultForkArgs{Target: "hv-fork", TTL: "1h"}, &fr)
	if fr.Vault.ExpiresAt == nil {
		t.Fatalf("fork with ttl: %+v", fr.Vault)
	}

	f.startWorkerProcess(t.TempDir(), "t2")
	f.waitMembers("t2")
	w1.Process.Signal(syscall.SIGTERM)
	if err := w1.Wait(); err != nil {
		t.Fatalf("t1 did not stop cleanly: %v", err)
	}

	var info messages.VaultResult
	call("hv", messages.OpVaultInfo, nil, &info)
	if info.Vault.Worker != "t2" {
		t.Fatalf("vault served by %q, want t2", info.Vault.Worker)
	}
	var log messages.HistoryLogResult
	call("hv", messages.OpHistoryLog, messages.HistoryLogArgs{Path: "/f.txt"}, &log)
	if len(log.Versions) != 3 {
		t.Fatalf("log on the new worker: %+v, want 3 versions", log.Versions)
	}
	var old messages.HistoryCatResult
	call("hv", messages.OpHistoryCat, messages.HistoryVersionArgs{Path: "/f.txt", Version: 1}, &old)
	if old.Content == nil || *old.Content != "one\n" {
		t.Fatalf("version 1 on the new worker: %+v", old)
	}
	var st messages.VaultSettingsResult
	call("hv", messages.OpVaultSettings, nil, &st)
	if st.Settings.AutoKeep != 2 || st.Settings.QuotaMode != "unique" {
		t.Fatalf("settings on the new worker: %+v", st.Settings)
	}
	call("hv-fork", messages.OpVaultInfo, nil, &info)
	if info.Vault.ExpiresAt == nil || *info.Vault.ExpiresAt != *fr.Vault.ExpiresAt {
		t.Fatalf("fork's expiry on the new worker: %v, want %v", info.Vault.ExpiresAt, *fr.Vault.ExpiresAt)
	}

	var stats messages.StatsResult
	call("hv", messages.OpStats, nil, &stats)
	if stats.Vault == nil || stats.Vault.Versions != 3 || stats.Store.Vaults < 1 {
		t.Fatalf("stats through the fleet: %+v", stats)
	}
	var m messages.MaintainResult
	call("hv", messages.OpMaintain, nil, &m)
	if m.Vaults < 1 {
		t.Fatalf("maint.run through the fleet: %+v", m)
	}
	var ac messages.AuditClearResult
	call("hv", messages.OpAuditClear, messages.AuditClearArgs{Before: "2099-01-01T00:00:00Z", DryRun: true}, &ac)
	if !ac.DryRun {
		t.Fatalf("audit.clear dry run: %+v", ac)
	}
}

// TestForkTTLIsSweptByItsWorker: a fork made with a TTL through the
// fleet is deleted by the worker that owns it once the TTL passed, and
// stays deleted (its tombstone reached the object store).
func TestForkTTLIsSweptByItsWorker(t *testing.T) {
	f := startFleet(t)
	f.addWorker("s1")
	c := f.client()
	ctx := context.Background()
	call := func(v string, op messages.Op, args, out any) error {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return c.Call(cctx, "default", v, op, args, out)
	}
	if err := call("base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("base", messages.OpVaultFork, messages.VaultForkArgs{Target: "brief", TTL: "1s"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("base", messages.OpVaultFork, messages.VaultForkArgs{Target: "lasting", TTL: "1h"}, nil); err != nil {
		t.Fatal(err)
	}
	var me *messages.Error
	if err := call("base", messages.OpVaultFork, messages.VaultForkArgs{Target: "bad", TTL: "soon"}, nil); !errors.As(err, &me) || me.Code != messages.CodeInvalidArgument {
		t.Fatalf("fork with ttl soon: %v, want INVALID_ARGUMENT", err)
	}
	// The worker sweeps every 5 s: wait generously.
	poll.Until(t, 60*time.Second, "the expired fork swept", func() (bool, error) {
		err := call("brief", messages.OpVaultInfo, nil, nil)
		return errors.As(err, &me) && me.Code == messages.CodeVaultNotFound, err
	})
	var l messages.VaultListResult
	if err := call("", messages.OpVaultList, nil, &l); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, v := range l.Vaults {
		names[v.Name] = true
	}
	if !names["base"] || !names["lasting"] || names["brief"] {
		t.Fatalf("vaults after the sweep: %v, want base and lasting", names)
	}
}
