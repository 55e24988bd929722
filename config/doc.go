// Package config owns avfs's one configuration tree: defaults that make the
// single-machine case work with no file at all, then avfs.yaml, then
// AVFS_* environment variables, then command-line flags (each overriding
// the one before), all through one viper instance.
package config
