package cli

import (
	"encoding/base64"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// asked reports whether the command line chose one of formats with
// --output or --json, rather than by default.
func (a *app) asked(cmd *cobra.Command, formats ...string) bool {
	f := cmd.Flags()
	return (f.Changed("output") || f.Changed("json")) && slices.Contains(formats, a.format)
}

// catRaw writes a file's bytes to stdout. A binary file goes to a
// terminal only when force is set.
func (a *app) catRaw(cmd *cobra.Command, fc *client.Client, v, p string, force bool) error {
	ctx := cmd.Context()
	var r messages.CatResult
	_, err := a.do(ctx, messages.OpCat, v, messages.CatArgs{Path: p}, &r)
	if fc != nil && tooLargeForReply(err) {
		// Too large for one reply: the worker puts it in the
		// namespace's transfer bucket and the bytes stream from there.
		_, err = a.do(client.ViaIntake(ctx), messages.OpCat, v, messages.CatArgs{Path: p, Object: true}, &r)
	}
	if err != nil {
		return err
	}
	if r.Object != nil {
		return a.download(ctx, fc, *r.Object, a.stdout, false)
	}
	return a.writeContent(r, p, force)
}

// writeContent writes the bytes of r, a cat of p, to stdout. A binary
// file goes to a terminal only when force is set.
func (a *app) writeContent(r messages.CatResult, p string, force bool) error {
	var b []byte
	switch {
	case r.Content != nil:
		b = []byte(*r.Content)
	case r.ContentBase64 != nil:
		var err error
		if b, err = base64.StdEncoding.DecodeString(*r.ContentBase64); err != nil {
			return fmt.Errorf("decode %s: %w", p, err)
		}
		if !force && isTerminal(a.stdout) {
			return usagef("%s is binary (%s): `avfs cat --raw %s` writes it anyway, `avfs cat %s > FILE` saves it", p, size(r.Size), p, p)
		}
	}
	_, err := a.stdout.Write(b)
	return err
}
