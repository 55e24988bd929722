package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestServeHTTPMetrics(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var errb strings.Builder
		code := Main(ctx, []string{"serve", "--json", "--http", "127.0.0.1:0"}, strings.NewReader(""), pw, &errb, Options{})
		if code != 0 {
			t.Errorf("serve: exit %d: %s", code, errb.String())
		}
		pw.Close()
		done <- code
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("serve output: %v", err)
	}
	go io.Copy(io.Discard, pr)
	var info map[string]any
	if err := json.Unmarshal([]byte(line), &info); err != nil {
		t.Fatalf("serve output %q: %v", line, err)
	}
	addr, _ := info["http"].(string)
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("serve printed no bound http address: %s", line)
	}
	if code, body := get(t, "http://"+addr+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	e.ok("vault", "create", "m1")
	e.ok("vault", "list")
	code, body := get(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	for _, want := range []string{`avfs_requests_total{op="vault.create"`, `avfs_request_duration_seconds_bucket{`, "avfs_mounts_active", "avfs_queue_depth"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the http endpoint still answers after serve stopped")
	}
}
