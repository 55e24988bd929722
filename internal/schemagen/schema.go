package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/avfs/avfs/messages"
)

// Draft is the JSON Schema dialect of every file.
const Draft = "https://json-schema.org/draft/2020-12/schema"

// Schema is the subset of JSON Schema 2020-12 the generator writes. Field
// order is output order.
type Schema struct {
	Dialect              string    `json:"$schema,omitempty"`
	Comment              string    `json:"$comment,omitempty"`
	Title                string    `json:"title,omitempty"`
	Description          string    `json:"description,omitempty"`
	Ref                  string    `json:"$ref,omitempty"`
	Type                 any       `json:"type,omitempty"` // string or []string
	Format               string    `json:"format,omitempty"`
	ContentEncoding      string    `json:"contentEncoding,omitempty"`
	Const                any       `json:"const,omitempty"`
	Enum                 []any     `json:"enum,omitempty"`
	Minimum              *int64    `json:"minimum,omitempty"`
	AnyOf                []*Schema `json:"anyOf,omitempty"`
	Items                *Schema   `json:"items,omitempty"`
	Properties           *ordered  `json:"properties,omitempty"`
	Required             []string  `json:"required,omitempty"`
	AdditionalProperties any       `json:"additionalProperties,omitempty"` // false or *Schema
	Defs                 *ordered  `json:"$defs,omitempty"`
}

// ordered is a JSON object that keeps its keys in insertion order.
type ordered struct {
	keys []string
	vals map[string]*Schema
}

func (o *ordered) set(k string, s *Schema) {
	if o.vals == nil {
		o.vals = map[string]*Schema{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = s
}

func (o *ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal encodes without HTML escaping, so descriptions stay readable.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

var (
	typeRawMessage = reflect.TypeFor[json.RawMessage]()
	typeTime       = reflect.TypeFor[time.Time]()
	typeOp         = reflect.TypeFor[messages.Op]()
	typeCode       = reflect.TypeFor[messages.Code]()
)

// rfc3339 lists the string fields that carry an RFC 3339 time, by
// "Type.json_name"; they get format date-time.
var rfc3339 = map[string]bool{
	"VaultInfo.created_at": true, "Entry.mtime": true, "BatchFile.mtime": true,
	"Checkpoint.created_at": true, "AuditEvent.time": true, "Envelope.started_at": true,
	"Approval.requested_at": true, "Approval.expires_at": true, "Member.last_seen": true,
}

// builder turns Go types into one schema file: the root type plus $defs
// for every named struct or enum type it reaches.
type builder struct {
	src    *source
	strict bool // closed objects: args are decoded with DisallowUnknownFields
	defs   map[string]*Schema
	root   reflect.Type
}

func newBuilder(src *source, strict bool) *builder {
	return &builder{src: src, strict: strict, defs: map[string]*Schema{}}
}

func typeName(t reflect.Type) string {
	if n, ok := names[t.Name()]; ok {
		return n
	}
	return t.Name()
}

// file builds the whole document for root.
func (b *builder) file(root reflect.Type) (*Schema, error) {
	b.root = root
	s, err := b.structSchema(root)
	if err != nil {
		return nil, err
	}
	s.Dialect = Draft
	s.Title = typeName(root)
	s.Description = b.src.types[root.Name()]
	b.finish(s)
	return s, nil
}

// finish attaches the collected $defs, sorted by name.
func (b *builder) finish(s *Schema) {
	if len(b.defs) == 0 {
		return
	}
	keys := make([]string, 0, len(b.defs))
	for k := range b.defs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s.Defs = &ordered{}
	for _, k := range keys {
		s.Defs.set(k, b.defs[k])
	}
}

// ref returns a $ref to the named type t, defining it on first use.
func (b *builder) ref(t reflect.Type) (*Schema, error) {
	if t == b.root {
		return &Schema{Ref: "#"}, nil
	}
	name := typeName(t)
	if _, ok := b.defs[name]; !ok {
		b.defs[name] = &Schema{} // placeholder: breaks cycles
		var def *Schema
		var err error
		switch t {
		case typeOp:
			def = b.opEnum()
		case typeCode:
			def = codeEnum()
		default:
			def, err = b.structSchema(t)
		}
		if err != nil {
			return nil, err
		}
		def.Title = name
		if d := b.src.types[t.Name()]; d != "" {
			def.Description = d
		}
		b.defs[name] = def
	}
	return &Schema{Ref: "#/$defs/" + name}, nil
}

func (b *builder) opEnum() *Schema {
	s := &Schema{Type: "string"}
	for _, o := range ops {
		s.Enum = append(s.Enum, string(o.Op))
	}
	return s
}

func codeEnum() *Schema {
	s := &Schema{Type: "string"}
	for _, c := range messages.Codes() {
		s.Enum = append(s.Enum, string(c))
	}
	return s
}

// field is one JSON member of a struct, after Go's encoding rules.
type field struct {
	goType, goName, name string
	t                    reflect.Type
	omitempty            bool
}

// fields lists the JSON members of struct t in order, flattening embedded
// structs without a tag as encoding/json does.
func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, fields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, field{goType: t.Name(), goName: f.Name, name: name, t: f.Type,
			omitempty: strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")})
	}
	return out
}

func (b *builder) structSchema(t reflect.Type) (*Schema, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%v: want a struct", t)
	}
	s := &Schema{Type: "object", Properties: &ordered{}}
	for _, f := range fields(t) {
		fs, err := b.schema(f.t)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t.Name(), f.goName, err)
		}
		key := f.goType + "." + f.name
		if d := b.src.fields[f.goType+"."+f.goName]; d != "" {
			fs.Description = d
		} else if n := notes[key]; n != "" {
			fs.Description = n
		}
		if rfc3339[key] {
			fs.Format = "date-time"
		}
		if c, ok := constants[key]; ok {
			c(fs)
		}
		s.Properties.set(f.name, fs)
		if !f.omitempty {
			s.Required = append(s.Required, f.name)
		}
	}
	if len(s.Properties.keys) == 0 {
		s.Properties = nil
	}
	if b.strict {
		s.AdditionalProperties = false
	}
	return s, nil
}

// notes describe wire fields that have no doc comment in package
// messages; a doc comment there takes precedence.
var notes = map[string]string{
	"Request.op":         "The op; it must equal the subject's op token. If omitted, the worker takes it from the subject.",
	"Request.namespace":  "Must equal the subject's namespace token, else the reply is PERMISSION_DENIED. If empty, the worker takes it from the subject.",
	"Request.vault":      "Must equal the subject's vault token (empty or omitted for the namespace token _), else the reply is PERMISSION_DENIED.",
	"Request.request_id": "Idempotency key, unique per request: a repeated id is answered from the worker's request log with the first result. Send the same value in the Nats-Msg-Id and Avfs-Request-Id headers.",
	"Request.actor":      "Who asks, recorded in audit events.",
	"Request.args":       "The op's args object; ops.json names its schema file for each op.",
	"Reply.request_id":   "The request's request_id.",
	"Reply.result":       "The op's result object (ops.json names its schema file), present when error is absent.",
	"Reply.error":        "Present when the request failed; result is then absent.",
}

// constants pins fields whose values package messages fixes.
var constants = map[string]func(*Schema){
	"Envelope.schema": func(s *Schema) { s.Const = messages.EnvelopeSchema },
	"Envelope.status": func(s *Schema) {
		s.Enum = []any{messages.StatusCompleted, messages.StatusTimedOut, messages.StatusCanceled,
			messages.StatusDenied, messages.StatusApprovalRequired, messages.StatusFailedToStart}
	},
}

// schema describes a value of type t as encoding/json writes it.
func (b *builder) schema(t reflect.Type) (*Schema, error) {
	switch {
	case t == typeRawMessage:
		return &Schema{}, nil // any JSON value
	case t == typeTime:
		return &Schema{Type: "string", Format: "date-time"}, nil
	case t == typeOp || t == typeCode:
		return b.ref(t)
	}
	switch t.Kind() {
	case reflect.Bool:
		return &Schema{Type: "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &Schema{Type: "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		zero := int64(0)
		return &Schema{Type: "integer", Minimum: &zero}, nil
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: "number"}, nil
	case reflect.String:
		return &Schema{Type: "string"}, nil
	case reflect.Interface:
		return &Schema{}, nil
	case reflect.Pointer:
		inner, err := b.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return nullable(inner), nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &Schema{Type: []string{"string", "null"}, ContentEncoding: "base64"}, nil
		}
		items, err := b.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		if t.Kind() == reflect.Array {
			return &Schema{Type: "array", Items: items}, nil
		}
		return &Schema{Type: []string{"array", "null"}, Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%v: map keys must be strings", t)
		}
		s := &Schema{Type: []string{"object", "null"}}
		if t.Elem().Kind() != reflect.Interface {
			v, err := b.schema(t.Elem())
			if err != nil {
				return nil, err
			}
			s.AdditionalProperties = v
		}
		return s, nil
	case reflect.Struct:
		if t.Name() == "" {
			return b.structSchema(t)
		}
		return b.ref(t)
	}
	return nil, fmt.Errorf("%v: no JSON Schema mapping for kind %s", t, t.Kind())
}

// nullable lets s also be null.
func nullable(s *Schema) *Schema {
	if ts, ok := s.Type.(string); ok && s.Ref == "" && len(s.Enum) == 0 && s.Const == nil {
		s.Type = []string{ts, "null"}
		return s
	}
	if s.Type == nil && s.Ref == "" && s.Enum == nil && s.Const == nil {
		return s // any value, null included
	}
	return &Schema{AnyOf: []*Schema{s, {Type: "null"}}}
}
