package messages

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeWork: whatever a sender puts on a worker subject, decoding
// never panics, and a request it accepts is exactly the subject's: its
// namespace, vault and op are the subject's tokens, and each is a name
// a vault can have.
func FuzzDecodeWork(f *testing.F) {
	for _, s := range []struct{ ns, vault, op, body string }{
		{"team-a", "v", "file.cat", `{"op":"file.cat","namespace":"team-a","vault":"v","args":{"path":"/x"}}`},
		{"team-a", "_", "vault.list", `{}`},
		{"team-a", "b$v", "file.cat", `{}`},
		{"team-a", "v", "file.cat", `{"namespace":"team-b"}`},
		{"team-a", "src", "vault.fork", `{"args":{"target":"../x"}}`},
		{"a", "v", "x", `{not json`},
	} {
		f.Add(s.ns, s.vault, s.op, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, ns, vault, op string, body []byte) {
		subj := "avfs.v1.work.w1." + ns + "." + vault + "." + op
		req, e := DecodeWork(subj, body)
		if e != nil {
			if e.Code != CodeInvalidArgument && e.Code != CodePermissionDenied {
				t.Fatalf("%s %q: code %s", subj, body, e.Code)
			}
			return
		}
		parts := strings.SplitN(subj, ".", 7)
		wantVault := parts[5]
		if wantVault == NoVault {
			wantVault = ""
		}
		if req.Namespace != parts[4] || req.Vault != wantVault || string(req.Op) != parts[6] {
			t.Fatalf("%s %q: decoded %s %s/%s", subj, body, req.Op, req.Namespace, req.Vault)
		}
		if !ValidName(req.Namespace) || (req.Vault != "" && !ValidName(req.Vault)) {
			t.Fatalf("%s: accepted names %q/%q", subj, req.Namespace, req.Vault)
		}
	})
}

// FuzzValidJSONText: a JSON string that ValidJSONText passes decodes
// without any byte replaced: U+FFFD comes out only where the sender
// wrote one.
func FuzzValidJSONText(f *testing.F) {
	for _, s := range []string{`"/u"`, `"/u\udcff"`, "\"/u\xff\"", `"\ud83d\ude00"`, `"\ufffd"`, `"\\udcff"`, "\"\xef\xbf\xbd\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s string
		if json.Unmarshal(data, &s) != nil || !ValidJSONText(data) {
			return
		}
		if strings.ContainsRune(s, '\ufffd') && !strings.Contains(string(data), "\ufffd") &&
			!strings.Contains(strings.ToLower(string(data)), `\ufffd`) {
			t.Fatalf("%q passed but decodes to %q", data, s)
		}
	})
}
