package policy

// Categories used by the default rules.
const (
	CategoryPrivilege      = "privilege"
	CategoryHostPath       = "host_path"
	CategoryNetwork        = "network"
	CategoryPackageInstall = "package_install"
	CategoryReadOnly       = "read_only"
	CategoryMutating       = "mutating"
	CategoryWrapper        = "wrapper"
)

// Default returns the policy built from DefaultRules, with
// AllowWithCheckpoint for commands no rule knows: an unknown program may
// change anything in the vault, and a checkpoint makes that undoable.
func Default() *Policy {
	p, err := New(DefaultRules(), AllowWithCheckpoint)
	if err != nil {
		// DefaultRules is a constant of this package; TestDefaultRulesValid
		// keeps it valid.
		panic("policy: default rules: " + err.Error())
	}
	return p
}

// DefaultRules returns the default rule set, a fresh slice on every call.
// Order matters (the first match wins): denials first, then approvals, then
// the mutating exceptions of otherwise read-only tools, then read-only tools,
// then everything known to mutate. Commands are a guardrail for an agent
// working in a checkpointed vault, not a sandbox: interpreters and tools that
// run commands from their own input (awk's system(), make, git aliases, a
// script file) are decided by their own name only.
func DefaultRules() []Rule {
	return []Rule{
		{
			Name: "privilege",
			Programs: []string{
				"sudo", "su", "doas", "pkexec", "runuser",
				"chown", "chgrp", "setcap",
				"chroot", "nsenter", "unshare",
				"docker", "podman", "nerdctl", "ctr",
			},
			Action:     Deny,
			Reason:     "changes identity, ownership or isolation; a container runtime or privilege tool can reach the whole host",
			Categories: []string{CategoryPrivilege},
		},
		{
			Name: "host-admin",
			Programs: []string{
				"mount", "umount", "losetup", "swapon", "swapoff",
				"mkfs", "mkfs.*", "fdisk", "parted", "dd",
				"modprobe", "insmod", "rmmod",
				"systemctl", "service", "reboot", "shutdown", "halt", "poweroff",
				"iptables", "ip6tables", "nft",
				"crontab",
			},
			Action:     Deny,
			Reason:     "administers the host (devices, kernel, services, firewall, scheduled jobs), outside any vault",
			Categories: []string{CategoryPrivilege},
		},
		{
			// Before every allow rule, so `rm -rf /` or `cat /etc/passwd`
			// never reaches them.
			Name:         "host-path",
			PathsOutside: true,
			Action:       Deny,
			Reason:       "names a path outside the workspace",
			Categories:   []string{CategoryHostPath},
		},
		{
			Name: "network",
			Programs: []string{
				"curl", "wget", "aria2c", "http", "https",
				"ssh", "scp", "sftp", "rsync", "ftp", "telnet",
				"nc", "ncat", "netcat", "socat",
			},
			Action:     RequireApproval,
			Reason:     "talks to the network: can fetch untrusted code or send data away",
			Categories: []string{CategoryNetwork},
			Network:    true,
		},
		{
			Name:        "git-network",
			Programs:    []string{"git"},
			Subcommands: []string{"clone", "fetch", "pull", "push", "ls-remote", "submodule"},
			Action:      RequireApproval,
			Reason:      "git talks to a remote: fetches untrusted code or publishes work",
			Categories:  []string{CategoryNetwork},
			Network:     true,
		},
		{
			Name:        "js-package-install",
			Programs:    []string{"npm", "yarn", "pnpm", "bun"},
			Subcommands: []string{"install*", "i", "it", "add", "ci", "update", "up", "upgrade", "publish", "dlx"},
			Action:      RequireApproval,
			Reason:      "installs or publishes packages: runs their install scripts and talks to the registry",
			Categories:  []string{CategoryPackageInstall},
			Network:     true,
		},
		{
			Name:       "js-package-run",
			Programs:   []string{"npx", "pnpx", "bunx"},
			Action:     RequireApproval,
			Reason:     "may download a package from the registry and run it",
			Categories: []string{CategoryPackageInstall},
			Network:    true,
		},
		{
			Name:        "pip-install",
			Programs:    []string{"pip", "pip3", "pip3.*"},
			Subcommands: []string{"install", "download", "uninstall", "wheel"},
			Action:      RequireApproval,
			Reason:      "installs Python packages: runs their build scripts and talks to the index",
			Categories:  []string{CategoryPackageInstall},
			Network:     true,
		},
		{
			Name:       "python-pip-install",
			Programs:   []string{"python", "python3", "python3.*"},
			Args:       []string{"-m", "pip", "install"},
			Action:     RequireApproval,
			Reason:     "installs Python packages through python -m pip",
			Categories: []string{CategoryPackageInstall},
			Network:    true,
		},
		{
			Name:        "pipx-uv-install",
			Programs:    []string{"pipx", "uv"},
			Subcommands: []string{"install", "run", "inject", "upgrade*", "reinstall*", "add", "sync", "pip", "tool"},
			Action:      RequireApproval,
			Reason:      "installs or runs Python packages from the index",
			Categories:  []string{CategoryPackageInstall},
			Network:     true,
		},
		{
			Name:        "cargo-install",
			Programs:    []string{"cargo"},
			Subcommands: []string{"install", "publish", "login"},
			Action:      RequireApproval,
			Reason:      "installs a crate's binaries, publishes, or stores registry credentials",
			Categories:  []string{CategoryPackageInstall},
			Network:     true,
		},
		{
			Name:        "go-install",
			Programs:    []string{"go"},
			Subcommands: []string{"install", "get"},
			Action:      RequireApproval,
			Reason:      "downloads modules and installs binaries outside the workspace",
			Categories:  []string{CategoryPackageInstall},
			Network:     true,
		},
		{
			Name:     "system-package-install",
			Programs: []string{"apt", "apt-get", "aptitude", "yum", "dnf", "microdnf", "apk", "zypper", "brew", "port", "snap"},
			Subcommands: []string{
				"install", "reinstall", "add", "remove", "purge", "del", "erase", "uninstall", "autoremove",
				"update", "upgrade", "dist-upgrade", "full-upgrade",
			},
			Action:     RequireApproval,
			Reason:     "changes the system's packages",
			Categories: []string{CategoryPackageInstall},
			Network:    true,
		},
		{
			Name:        "ruby-package-install",
			Programs:    []string{"gem", "bundle", "bundler"},
			Subcommands: []string{"install", "update", "add", "push"},
			Action:      RequireApproval,
			Reason:      "installs or publishes Ruby gems",
			Categories:  []string{CategoryPackageInstall},
			Network:     true,
		},
		{
			// The next three are the mutating uses of tools the read-only
			// rule allows, so they must come before it.
			Name:       "find-delete",
			Programs:   []string{"find"},
			Args:       []string{"-delete"},
			Action:     AllowWithCheckpoint,
			Reason:     "find -delete removes files",
			Categories: []string{CategoryMutating},
		},
		{
			Name:       "find-write",
			Programs:   []string{"find"},
			Args:       []string{"-f[lp]*"}, // -fls, -fprint, -fprint0, -fprintf
			Action:     AllowWithCheckpoint,
			Reason:     "find writes its listing to a file",
			Categories: []string{CategoryMutating},
		},
		{
			Name:       "sed-in-place",
			Programs:   []string{"sed"},
			Args:       []string{"-*i*"}, // -i, -i.bak, -Ei, --in-place
			Action:     AllowWithCheckpoint,
			Reason:     "sed edits files in place",
			Categories: []string{CategoryMutating},
		},
		{
			Name:     "git-read-only",
			Programs: []string{"git"},
			Subcommands: []string{
				"status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "blame",
				"shortlog", "describe", "grep", "cat-file", "rev-list", "show-ref", "merge-base",
				"name-rev", "for-each-ref", "diff-tree", "diff-files", "diff-index", "whatchanged",
				"count-objects", "version", "help",
			},
			Action:     Allow,
			Reason:     "inspects the repository without changing it",
			Categories: []string{CategoryReadOnly},
		},
		{
			Name: "read-only",
			Programs: []string{
				"ls", "cat", "head", "tail", "less", "more", "wc", "nl", "tree",
				"grep", "egrep", "fgrep", "rg", "find", "sed",
				"stat", "file", "du", "df", "pwd", "cd", ":",
				"echo", "printf", "true", "false", "test", `\[`, "sleep", "seq",
				"diff", "cmp", "comm", "sort", "uniq", "cut", "tr", "paste", "join", "column", "fold",
				"od", "xxd", "hexdump", "strings", "jq",
				"which", "type", "env", "printenv", "date", "whoami", "id", "uname",
				"basename", "dirname", "realpath", "readlink",
				"sha256sum", "sha1sum", "sha512sum", "md5sum", "b2sum", "cksum",
			},
			Action:     Allow,
			Reason:     "reads without changing anything",
			Categories: []string{CategoryReadOnly},
		},
		{
			// A redirection is checked as a command named by its operator.
			Name:       "redirect-read",
			Programs:   []string{"<"},
			Action:     Allow,
			Reason:     "reads a file through a redirection",
			Categories: []string{CategoryReadOnly},
		},
		{
			Name:       "redirect-write",
			Programs:   []string{">", ">>", ">|", "&>", "&>>", "<>", ">&"},
			Action:     AllowWithCheckpoint,
			Reason:     "writes a file through a redirection",
			Categories: []string{CategoryMutating},
		},
		{
			// Their wrapped command is decided on its own; the wrapper adds
			// nothing to it.
			Name: "wrapper",
			Programs: []string{
				"nice", "nohup", "timeout", "time", "command", "builtin", "exec", "eval",
				"stdbuf", "ionice", "setsid", "taskset", "xargs", "watch", "busybox", "strace", "ltrace",
			},
			Action:     Allow,
			Reason:     "runs another command, which is decided on its own",
			Categories: []string{CategoryWrapper},
		},
		{
			Name: "mutating-default",
			Programs: []string{
				"rm", "rmdir", "mv", "cp", "mkdir", "touch", "chmod", "ln", "tee", "truncate",
				"install", "patch", "tar", "zip", "unzip", "gzip", "gunzip", "xz", "unxz",
				"git", "make", "cmake", "ninja", "meson", "bazel",
				"go", "gofmt", "cargo", "rustc", "rustfmt", "gcc", "cc", "clang", "g++", "c++",
				"npm", "yarn", "pnpm", "bun", "node", "deno", "tsc",
				"python", "python3", "python3.*", "pip", "pip3", "pytest",
				"java", "javac", "mvn", "gradle", "ruby", "perl",
				"sh", "bash", "dash", "zsh", "ksh",
			},
			Action:     AllowWithCheckpoint,
			Reason:     "changes files in the workspace: checkpoint first so it can be undone",
			Categories: []string{CategoryMutating},
		},
	}
}
