package handler

import (
	"context"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func (h *Handler) searchOps() {
	h.ops[messages.OpSearch] = bind(h.search)
	h.ops[messages.OpReindex] = bind(h.reindex)
	h.ops[messages.OpGrep] = bind(h.grep)
	h.ops[messages.OpFind] = bind(h.find)
	h.ops[messages.OpLabel] = bind(h.label)
	h.ops[messages.OpLabelsGet] = bind(h.labelsGet)
}

func labelsResult(p string, l vault.Labels) messages.LabelsResult {
	return messages.LabelsResult{Path: p, Tags: l.Tags, Meta: l.Meta}
}

func (h *Handler) label(ctx context.Context, req messages.Request, a messages.LabelArgs) (any, error) {
	l, err := h.vault(req).Label(ctx, a.Path, a.Tags, a.Untags, a.Set, a.Unset, meta(ctx, req))
	if err != nil {
		return nil, err
	}
	p, _ := cleanPath(a.Path)
	return labelsResult(p, l), nil
}

func (h *Handler) labelsGet(ctx context.Context, req messages.Request, a messages.PathArgs) (any, error) {
	p, l, err := h.vault(req).Labels(ctx, a.Path)
	if err != nil {
		return nil, err
	}
	return labelsResult(p, l), nil
}

func (h *Handler) search(ctx context.Context, req messages.Request, a messages.SearchArgs) (messages.SearchResult, error) {
	if a.Query == "" {
		return messages.SearchResult{}, messages.Errorf(messages.CodeInvalidArgument, "search needs a query")
	}
	hits, err := h.vault(req).Search(ctx, a.Query, a.Limit)
	if err != nil {
		return messages.SearchResult{}, err
	}
	out := messages.SearchResult{Query: a.Query, Hits: make([]messages.SearchHit, len(hits))}
	for i, x := range hits {
		out.Hits[i] = messages.SearchHit{Path: x.Path, Snippet: x.Snippet, Score: x.Score}
	}
	return out, nil
}

func (h *Handler) reindex(ctx context.Context, req messages.Request, _ struct{}) (messages.ReindexResult, error) {
	n, err := h.vault(req).Reindex(ctx, meta(ctx, req))
	if err != nil {
		return messages.ReindexResult{}, err
	}
	return messages.ReindexResult{Files: n}, nil
}

func (h *Handler) grep(ctx context.Context, req messages.Request, a messages.GrepArgs) (messages.GrepResult, error) {
	if a.Pattern == "" {
		return messages.GrepResult{}, messages.Errorf(messages.CodeInvalidArgument, "grep needs a pattern")
	}
	if a.Path == "" {
		a.Path = "/"
	}
	ms, cut, err := h.vault(req).Grep(ctx, a.Pattern, a.Path, vault.GrepOptions{IgnoreCase: a.IgnoreCase, Limit: a.Limit})
	if err != nil {
		return messages.GrepResult{}, err
	}
	out := messages.GrepResult{Matches: make([]messages.GrepMatch, len(ms)), Truncated: cut}
	for i, m := range ms {
		out.Matches[i] = messages.GrepMatch{Path: m.Path, Line: m.Line, Text: m.Text}
	}
	return out, nil
}

func (h *Handler) find(ctx context.Context, req messages.Request, a messages.FindArgs) (messages.FindResult, error) {
	if a.Path == "" {
		a.Path = "/"
	}
	o := vault.FindOptions{Name: a.Name, MinSize: a.MinSize, MaxSize: a.MaxSize, MaxDepth: a.Depth, Tags: a.Tags, Meta: a.Meta}
	switch a.Type {
	case "":
	case "f", "file":
		o.Kind = vault.KindFile
	case "d", "dir":
		o.Kind = vault.KindDir
	case "l", "symlink":
		o.Kind = vault.KindSymlink
	default:
		return messages.FindResult{}, messages.Errorf(messages.CodeInvalidArgument, "find --type %q: want f, d or l", a.Type)
	}
	if a.Depth < 0 || a.MinSize < 0 || a.MaxSize < 0 {
		return messages.FindResult{}, messages.Errorf(messages.CodeInvalidArgument, "find: depth and sizes must not be negative")
	}
	es, err := h.vault(req).Find(ctx, a.Path, o)
	if err != nil {
		return messages.FindResult{}, err
	}
	p, _ := cleanPath(a.Path)
	out := messages.FindResult{Path: p, Entries: make([]messages.Entry, len(es))}
	for i, e := range es {
		out.Entries[i] = entry(e)
	}
	return out, nil
}
