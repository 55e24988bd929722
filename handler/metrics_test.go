package handler_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

func TestMetricsScrape(t *testing.T) {
	ctx := context.Background()
	st, err := vault.Open(ctx, filepath.Join(t.TempDir(), "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mp, metricsHandler, shutdown, err := telemetry.SetupMetrics(telemetry.MetricsConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(ctx)
	h := handler.New(st, handler.Options{Meter: mp})

	do := func(op messages.Op, vaultName string, args any, want messages.Code) {
		t.Helper()
		b, _ := json.Marshal(args)
		rep := h.Handle(ctx, messages.Request{Op: op, Vault: vaultName, Args: b})
		var got messages.Code
		if rep.Error != nil {
			got = rep.Error.Code
		}
		if got != want {
			t.Fatalf("%s: got error %v, want %q", op, rep.Error, want)
		}
	}
	one := int64(1)
	do(messages.OpVaultCreate, "secret-project", messages.VaultCreateArgs{Quota: messages.QuotaArgs{MaxFiles: &one}}, "")
	do(messages.OpWrite, "secret-project", messages.WriteArgs{Path: "/a", Content: []byte("a")}, "")
	do(messages.OpWrite, "secret-project", messages.WriteArgs{Path: "/b", Content: []byte("b")}, messages.CodeQuotaExceeded)
	do(messages.OpCheckpointSave, "secret-project", messages.CheckpointArgs{Name: "c1"}, "")
	do(messages.OpVaultFork, "secret-project", messages.VaultForkArgs{Target: "secret-fork"}, "")
	do(messages.OpCheckpointRestore, "secret-project", messages.CheckpointArgs{Name: "c1"}, "")
	do(messages.OpCat, "secret-project", messages.PathArgs{Path: "/missing"}, messages.CodeNotFound)
	do("no.such.op", "secret-project", nil, messages.CodeInvalidArgument)

	srv := httptest.NewServer(metricsHandler)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	text := string(body)

	for _, want := range []string{
		`avfs_requests_total{op="vault.create",outcome="ok"} 1`,
		`avfs_requests_total{op="file.write",outcome="ok"} 1`,
		`avfs_requests_total{op="file.write",outcome="QUOTA_EXCEEDED"} 1`,
		`avfs_requests_total{op="file.cat",outcome="NOT_FOUND"} 1`,
		`avfs_requests_total{op="unknown",outcome="INVALID_ARGUMENT"} 1`,
		`avfs_quota_rejections_total{op="file.write"} 1`,
		`avfs_forks_total 1`,
		`avfs_checkpoints_saved_total{auto="false"} 1`,
		`avfs_checkpoints_restored_total 1`,
		`avfs_request_duration_seconds_count{op="vault.fork",outcome="ok"} 1`,
	} {
		if !hasSample(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(text, "secret") {
		t.Errorf("a vault name leaked into the metrics:\n%s", text)
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}

// hasSample finds a sample line, ignoring the scope labels the exporter
// adds (otel_scope_name, ...).
func hasSample(text, want string) bool {
	re := regexp.MustCompile(`,?otel_scope_[a-z_]+="[^"]*"`)
	for _, line := range strings.Split(text, "\n") {
		line = re.ReplaceAllString(line, "")
		line = strings.Replace(line, "{,", "{", 1)
		line = strings.Replace(line, "{}", "", 1)
		if line == want {
			return true
		}
	}
	return false
}
