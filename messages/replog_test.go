package messages

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestEncodeEntry: an entry encoded by EncodeEntry decodes to the entry
// json.Marshal's encoding decodes to, whatever of it is set: a new owner
// replays what the old owner appended.
func TestEncodeEntry(t *testing.T) {
	args := json.RawMessage(`{"path":"/a <b> & \"c\"","content":"aGVsbG8="}`)
	for _, e := range []ChangeEntry{
		{Kind: LogOp, Epoch: 3, Worker: "w1", Time: "2026-12-06T05:00:00.000000001Z",
			Request: &Request{Op: OpWrite, Namespace: "default", Vault: "v", RequestID: "r1", Actor: "agent", Args: args},
			Result:  json.RawMessage(`{"path":"/a","size":5,"created":true}`)},
		{Kind: LogOp, Epoch: 1, Worker: "w", Time: "t", Request: &Request{Op: OpMkdir, Namespace: "ns", Args: json.RawMessage(" \n")}},
		{Kind: LogOp, Request: &Request{Op: OpRm, Namespace: "ns"}, Result: json.RawMessage("null")},
		{Kind: LogResult, Worker: "w", Request: &Request{Op: OpVaultFork, Namespace: "ns", Vault: "src"}, Result: json.RawMessage(` {"x":1} `), ArgsHash: "ab"},
		{Kind: LogSnapshot, Reason: "exec"},
		{Kind: LogEpoch, Epoch: 9, Worker: "w2"},
	} {
		got, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		// json.Marshal refuses blank raw parts; EncodeEntry leaves them
		// out, as it leaves out empty ones.
		ref := e
		if e.Request != nil && len(bytes.TrimSpace(e.Request.Args)) == 0 {
			r := *e.Request
			r.Args = nil
			ref.Request = &r
		}
		want, err := json.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		var g, w ChangeEntry
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("EncodeEntry gave %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		// Raw parts compare as values: json.Marshal compacts and
		// escapes them, EncodeEntry keeps them as they are.
		if !sameJSON(t, g.Result, w.Result) {
			t.Errorf("result: got %s, want %s", g.Result, w.Result)
		}
		if (g.Request == nil) != (w.Request == nil) {
			t.Fatalf("request: got %s, want %s", got, want)
		}
		if g.Request != nil {
			if !sameJSON(t, g.Request.Args, w.Request.Args) {
				t.Errorf("args: got %s, want %s", g.Request.Args, w.Request.Args)
			}
			g.Request.Args, w.Request.Args = nil, nil
		}
		g.Result, w.Result = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}
