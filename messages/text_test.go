package messages

import (
	"encoding/json"
	"testing"
)

func TestValidJSONText(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"path":"/u"}`:                      true,
		`{"path":"/\u00e9"}`:                 true,
		`{"path":"/\ud83d\ude00"}`:           true, // a pair: 😀
		`{"path":"/\\udcff"}`:                true, // an escaped backslash, then text
		`{"path":"/` + "\xef\xbf\xbd" + `"}`: true, // U+FFFD itself is a name like any
		`{"path":"/u` + "\xff" + `"}`:        false,
		`{"path":"/u\udcff"}`:                false,
		`{"path":"/u\ud800"}`:                false,
		`{"path":"/u\ud800\u0041"}`:          false,
		`{"path":"/u\ud800x"}`:               false,
	} {
		if got := ValidJSONText([]byte(doc)); got != want {
			t.Errorf("%s: %v, want %v", doc, got, want)
		}
		// Whatever it says valid decodes to exactly what a sender meant:
		// no replacement character appears from nowhere.
		var m map[string]string
		if want && json.Unmarshal([]byte(doc), &m) != nil {
			t.Errorf("%s: not JSON", doc)
		}
	}
}

func TestInvalidString(t *testing.T) {
	bad := "/u\xff"
	for _, v := range []any{
		WriteArgs{Path: bad},
		&MoveArgs{Src: "/a", Dst: bad},
		WriteBatchArgs{Files: []BatchFile{{Path: "/ok"}, {Path: "/x", Target: bad}}},
		map[string]string{"k": bad},
	} {
		if s, ok := InvalidString(v); !ok || s != bad {
			t.Errorf("%#v: %q %v, want the bad string", v, s, ok)
		}
	}
	if _, ok := InvalidString(WriteArgs{Path: "/é", Content: []byte{0xff}}); ok {
		t.Error("valid text and binary content reported invalid")
	}
}
