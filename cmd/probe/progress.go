package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/hooks"
)

// progressVar declares --progress into p.
func progressVar(fs *pflag.FlagSet, p *bool) {
	fs.BoolVar(p, "progress", true, "progress bar on stderr")
}

// passProgress draws the progress of one pass of T tokens through layers
// layers, layer by layer, from a watch (hooks.Set.Watch) on every layer's
// resid_post that it adds to hs (a pass of tens of minutes at long T
// otherwise shows nothing until it ends); the watch does not make the pass
// run layers nothing else reads. end closes the bar: the pass is done when
// err is nil.
func passProgress(hs *hooks.Set, layers, T int) (end func(err error)) {
	bar := newProgressBar(progressOut)
	start := time.Now()
	p := analysis.Progress{Pass: 1, Passes: 1, T: T, Layers: layers, WorkLeft: float64(layers)}
	hs.Watch(hooks.ResidPost, func(_ string, l int, _ *tensor.Dense) error {
		p.Layer, p.Work, p.WorkLeft, p.Elapsed = l+1, float64(l+1), float64(layers-l-1), time.Since(start)
		bar.update(p)
		return nil
	})
	return func(err error) {
		if err == nil {
			// the layers a pass skipped (nothing read them) count as done
			p.Layer, p.Work, p.WorkLeft = layers, float64(layers), 0
			p.Done, p.Tokens, p.Elapsed = true, int64(T), time.Since(start)
			bar.update(p)
		}
		bar.finish()
	}
}

// progressOut is where sweep draws its progress bar (tests replace it).
var progressOut io.Writer = os.Stderr

// progressBar draws a sweep's progress: on a terminal one line redrawn in
// place (at most ten times a second), elsewhere one line per finished pass.
type progressBar struct {
	w     io.Writer
	tty   bool
	last  time.Time
	drawn bool
}

func newProgressBar(w io.Writer) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressBar{w: w, tty: tty}
}

// line renders one progress state.
func progressLine(p analysis.Progress) string {
	frac := 1.0
	if tot := p.Work + p.WorkLeft; tot > 0 {
		frac = p.Work / tot
	}
	const width = 24
	n := int(frac*width + 0.5)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	state := fmt.Sprintf("layer %d/%d", p.Layer, p.Layers)
	if p.Reused {
		state = "already finished"
	} else if p.Done {
		state = "done"
	}
	tokens := float64(p.Tokens)
	if !p.Done && p.Layers > 0 {
		tokens += float64(p.T) * float64(p.Layer) / float64(p.Layers)
	}
	secs := p.Elapsed.Seconds()
	rate, eta := "—", "—"
	if secs > 0 && tokens > 0 {
		rate = fmt.Sprintf("%.0f tok/s", tokens/secs)
	}
	if p.Work > 0 {
		eta = time.Duration(secs * p.WorkLeft / p.Work * float64(time.Second)).Round(time.Second).String()
	}
	pass := fmt.Sprintf("pass %d/%d (T=%d, sample %d)", p.Pass, p.Passes, p.T, p.Sample)
	if p.Label != "" { // ppl: the pass's model and variant
		pass = fmt.Sprintf("pass %d/%d %s T=%d sample %d", p.Pass, p.Passes, p.Label, p.T, p.Sample)
	}
	if p.Passes == 1 && p.Sample == 0 {
		pass = fmt.Sprintf("T=%d", p.T) // one pass (diag, capture)
	}
	return fmt.Sprintf("[%s] %3.0f%%  %s %s  %s  ETA %s", bar, 100*frac, pass, state, rate, eta)
}

func (b *progressBar) update(p analysis.Progress) {
	if !b.tty {
		if p.Done {
			fmt.Fprintln(b.w, progressLine(p))
		}
		return
	}
	if !p.Done && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	fmt.Fprintf(b.w, "\r\033[K%s", progressLine(p))
	b.drawn = true
}

// finish ends the redrawn line.
func (b *progressBar) finish() {
	if b.tty && b.drawn {
		fmt.Fprintln(b.w)
	}
}
