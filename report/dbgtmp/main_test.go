package dbg

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/filterlens/probe/report/browser"
	"github.com/filterlens/probe/report/papers"
	"github.com/filterlens/probe/report"
)

func TestDbg(t *testing.T) {
	if os.Getenv("PAPER") == "" {
		t.Skip()
	}
	r, _ := papers.Build(os.Getenv("PAPER"))
	w, err := r.Write("/tmp/dbg/out", report.WriteOptions{DPI: 30})
	if err != nil { t.Fatal(err) }
	res, err := browser.Check(context.Background(), "/usr/bin/chromium", w.HTML)
	if err != nil { t.Fatal(err) }
	for _, c := range res.Charts { fmt.Println(c) }
	for _, p := range res.Problems(0.02) { fmt.Println(p) }
	os.WriteFile("/tmp/dbg/page.png", res.Page, 0o644)
}
