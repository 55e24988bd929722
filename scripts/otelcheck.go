//go:build ignore

// otelcheck asks a Jaeger query API for the traces of `avfs demo` and
// checks what an operator must be able to follow: the trace of the failed
// attempt (send → route → process → exec) and the rollback's
// checkpoint.restore span linked to the checkpoint.save it rolled back to.
// Usage: go run scripts/otelcheck.go QUERY_URL SERVICE
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"
)

type span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

type traces struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []span `json:"spans"`
	} `json:"data"`
}

func get(url string, out any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func check(base, service string) error {
	var all traces
	if err := get(base+"/api/traces?service="+service+"&limit=1000&lookback=1h", &all); err != nil {
		return err
	}
	spans := map[string]span{}
	var execTrace, restore string
	var link *span
	for _, t := range all.Data {
		ops := map[string]bool{}
		for _, s := range t.Spans {
			spans[s.SpanID] = s
			ops[s.OperationName] = true
			if s.OperationName == "checkpoint.restore" {
				for _, r := range s.References {
					if r.RefType == "FOLLOWS_FROM" {
						restore, link = s.SpanID, &span{TraceID: r.TraceID, SpanID: r.SpanID}
					}
				}
			}
		}
		if ops["send"] && ops["route"] && ops["process"] && ops["exec"] && ops["changes"] {
			execTrace = t.TraceID
		}
	}
	if execTrace == "" {
		return fmt.Errorf("no trace with send, route, process, exec and changes among %d traces", len(all.Data))
	}
	if link == nil {
		return fmt.Errorf("no checkpoint.restore span with a link (FOLLOWS_FROM) among %d traces", len(all.Data))
	}
	// The linked span may be in a trace not returned above: ask for it.
	var linked traces
	if err := get(base+"/api/traces/"+link.TraceID, &linked); err != nil {
		return fmt.Errorf("linked trace %s: %w", link.TraceID, err)
	}
	for _, t := range linked.Data {
		for _, s := range t.Spans {
			if s.SpanID == link.SpanID {
				if s.OperationName != "checkpoint.save" {
					return fmt.Errorf("restore %s links to %s, want checkpoint.save", restore, s.OperationName)
				}
				fmt.Printf("ok: exec trace %s; restore span %s links to checkpoint.save %s in trace %s\n", execTrace, restore, s.SpanID, t.TraceID)
				return nil
			}
		}
	}
	return fmt.Errorf("span %s of the restore's link not found in trace %s", link.SpanID, link.TraceID)
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: otelcheck QUERY_URL SERVICE")
		os.Exit(2)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check(os.Args[1], os.Args[2])
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "otelcheck:", err)
			os.Exit(1)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
