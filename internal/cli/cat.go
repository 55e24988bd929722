package cli

import (
	"encoding/base64"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

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
func (a *app) catRaw(cmd *cobra.Command, v, p string, force bool) error {
	var r messages.CatResult
	if _, err := a.do(cmd.Context(), messages.OpCat, v, messages.PathArgs{Path: p}, &r); err != nil {
		return err
	}
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
