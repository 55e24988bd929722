package handler_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/avfs/avfs/messages"
)

// FuzzRequestArgs feeds arbitrary args documents to the ops that take
// paths and names: the handler never panics, answers with exactly one of
// a result and a typed error, refuses text that decoding would change,
// and a write it accepts reads back as written.
func FuzzRequestArgs(f *testing.F) {
	ops := []messages.Op{messages.OpWrite, messages.OpCat, messages.OpMkdir, messages.OpMv, messages.OpLs, messages.OpVaultFork, messages.OpQuotaSet, messages.OpWriteBatch}
	for i, s := range []string{
		`{"path":"/a","content":"eA=="}`, `{"path":"/u\udcff"}`, `{"path":"/u` + "\xff" + `"}`, `{"path":"/a/../b"}`,
		`{"src":"/a","dst":"/b"}`, `{"target":"../x"}`, `{"key":"max_size_mb","value":-1}`, `{"key":"max_files","value":9223372036854775807}`,
		`{"files":[{"path":"/d/f","type":"file","content":"eA=="}]}`, `null`, `[]`, `{"path":1}`, `{"path":"/\ud83d\ude00","parents":true}`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	h := newHandler(f)
	ctx := context.Background()
	if rep := h.Handle(ctx, messages.Request{Op: messages.OpVaultCreate, Vault: "v"}); rep.Error != nil {
		f.Fatal(rep.Error)
	}
	codes := messages.Codes()
	n := 0 // a fresh request id per input (the fuzzer calls serially here)
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		op := ops[int(which)%len(ops)]
		n++
		rep := h.Handle(ctx, messages.Request{Op: op, Vault: "v", RequestID: "fuzz-" + strconv.Itoa(n), Args: args})
		if (rep.Error == nil) == (rep.Result == nil) {
			t.Fatalf("%s %s: result %s and error %v", op, args, rep.Result, rep.Error)
		}
		if rep.Error != nil {
			if !slices.Contains(codes, rep.Error.Code) {
				t.Fatalf("%s %s: untyped error %+v", op, args, rep.Error)
			}
			return
		}
		if !messages.ValidJSONText(args) {
			t.Fatalf("%s %s: accepted text that decodes to something else", op, args)
		}
		if op != messages.OpWrite {
			return
		}
		var w messages.WriteArgs
		if json.Unmarshal(args, &w) != nil || w.Append {
			return
		}
		var res messages.WriteResult
		json.Unmarshal(rep.Result, &res)
		b, _ := json.Marshal(messages.PathArgs{Path: res.Path})
		cat := h.Handle(ctx, messages.Request{Op: messages.OpCat, Vault: "v", Args: b})
		var got messages.CatResult
		if cat.Error != nil || json.Unmarshal(cat.Result, &got) != nil {
			t.Fatalf("write %s then cat %s: %v", args, res.Path, cat.Error)
		}
		var content []byte
		if got.Content != nil {
			content = []byte(*got.Content)
		} else if got.ContentBase64 != nil {
			content, _ = base64.StdEncoding.DecodeString(*got.ContentBase64)
		}
		if string(content) != string(w.Content) {
			t.Fatalf("write %s: reads back %q", args, content)
		}
	})
}
