# Sourced by scripts/mountbench.sh and scripts/mountcpu.sh: the tree
# their workloads copy, read and remove.

# gen_tree DIR [NFILES]: 2,000 source-like text files (0.5–4 KB, 16 extensions) in
# 100 directories DIR/srcA/modB, 20 files each. Deterministic. NFILES
# (default 2000) is how many files (at most 2,000).
gen_tree() {
	local a b
	for a in 0 1 2 3 4 5 6 7 8 9; do
		for b in 0 1 2 3 4 5 6 7 8 9; do
			mkdir -p "$1/src$a/mod$b"
		done
	done
	awk -v root="$1" -v n="${2:-2000}" 'BEGIN {
		split("go rs c h py js ts md txt toml json yaml sh cc hpp java", ext, " ")
		for (i = 0; i < n; i++) {
			d = int(i / 20)
			f = sprintf("%s/src%d/mod%d/file%02d.%s", root, int(d / 10), d % 10, i % 20, ext[i % 16 + 1])
			lines = 8 + (i * 37) % 56
			printf "// file %d of the avfs mount benchmark tree\n", i > f
			for (l = 0; l < lines; l++)
				printf "func f%d_%d(x int) int { return x*%d + %d } // %d\n", i, l, (i * 31 + l) % 97, (l * 17 + i) % 1000, l > f
			close(f)
		}
	}'
}
