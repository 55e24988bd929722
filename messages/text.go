package messages

import (
	"reflect"
	"strconv"
	"unicode/utf8"
)

// Names are bytes on a host, but JSON strings are Unicode: encoding/json
// turns every invalid UTF-8 byte, and every unpaired surrogate escape
// ("\udcff"), into U+FFFD, so two different names would arrive as one.
// avfs refuses such text instead (INVALID_PATH) on both sides of the
// wire: a sender checks its strings with InvalidString before encoding,
// a receiver checks the document with ValidJSONText before decoding.

// ValidJSONText reports whether decoding the JSON document data keeps
// every string exactly: data is valid UTF-8 and holds no unpaired
// surrogate escape.
func ValidJSONText(data []byte) bool {
	if !utf8.Valid(data) {
		return false
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' || i+1 >= len(data) {
			continue
		}
		if data[i+1] != 'u' {
			i++ // an escaped character, perhaps a backslash
			continue
		}
		r, ok := hex4(data, i+2)
		switch {
		case !ok:
			i++ // not JSON: the decoder reports it
		case r >= 0xdc00 && r <= 0xdfff: // a low surrogate alone
			return false
		case r >= 0xd800 && r <= 0xdbff:
			if i+7 >= len(data) || data[i+6] != '\\' || data[i+7] != 'u' {
				return false
			}
			lo, ok := hex4(data, i+8)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}

func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(data[at:at+4]), 16, 32)
	return rune(n), err == nil
}

// InvalidString returns the first string in v (a struct, pointer, slice,
// array or map, walked through exported fields) that is not valid UTF-8,
// and whether there is one.
func InvalidString(v any) (string, bool) {
	return invalidString(reflect.ValueOf(v))
}

func invalidString(v reflect.Value) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); !utf8.ValidString(s) {
			return s, true
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return invalidString(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				if s, bad := invalidString(v.Field(i)); bad {
					return s, true
				}
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // bytes travel as base64
		}
		for i := 0; i < v.Len(); i++ {
			if s, bad := invalidString(v.Index(i)); bad {
				return s, true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if s, bad := invalidString(it.Key()); bad {
				return s, true
			}
			if s, bad := invalidString(it.Value()); bad {
				return s, true
			}
		}
	}
	return "", false
}

// ErrNotUTF8 is the INVALID_PATH error for text s that is not valid UTF-8.
func ErrNotUTF8(s string) *Error {
	return Errorf(CodeInvalidPath, "%q is not valid UTF-8: avfs keeps names as UTF-8 text and refuses others rather than fold two names into one", s)
}
