//go:build !unix

package vault

// oNoFollow is not available here: writeHostFile's Lstat check stands alone.
const oNoFollow = 0
