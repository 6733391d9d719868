// Package names finds the names closest to a misspelt one, for the "did
// you mean" of error messages (hook points, commands).
package names

import "sort"

// Closest returns up to n of names nearest to name in edit distance (ties
// in the order given), without repeats.
func Closest(name string, names []string, n int) []string {
	type cand struct {
		s string
		d int
	}
	var cs []cand
	seen := map[string]bool{}
	for _, c := range names {
		if !seen[c] {
			seen[c] = true
			cs = append(cs, cand{c, Distance(name, c)})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].s)
	}
	return out
}

// Distance is the Levenshtein distance between a and b in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
