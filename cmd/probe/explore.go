package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/explore"
)

// ExploreOptions are the options of probe explore.
type ExploreOptions struct {
	cmdIO
	Addr string
	Port int
	// Model: in folder mode, the model folder for rows when the manifest's
	// is elsewhere now; with Text or IDs, the model the default sweep runs.
	Model              string
	Text, IDs          string
	Lengths            string
	Samples, Bucket    int
	Out                string
	FullPass           bool
	Threads, MaxQueue  int
	FrameAncestors     string
	AllowExtrapolation bool
	// ready, when set, is called with the URL once the server listens
	// (in its own goroutine); the server stops when it returns false (tests).
	ready func(url string) bool
}

// flags declares the flags of probe explore into f and their relations.
func (o *ExploreOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := explore.Defaults()
	f.StringVar(&o.Addr, "addr", "127.0.0.1", "address to listen on; any but a loopback one requires the token printed at start on every request")
	f.IntVar(&o.Port, "port", 8457, "port to listen on (0: any free port)")
	f.StringVar(&o.Model, "model", "", "with a folder: the model folder for rows when the manifest's is not found; with --text/--ids: the model to sweep first")
	f.StringVar(&o.Text, "text", "", "run the default sweep on this text first (with --model), then explore it")
	f.StringVar(&o.IDs, "ids", "", "run the default sweep on this JSON list of token ids first (with --model), then explore it")
	f.StringVar(&o.Lengths, "lengths", "4k", "with --text/--ids: the sweep's context lengths")
	f.IntVar(&o.Samples, "samples", 1, "with --text/--ids: the sweep's samples per length")
	f.IntVar(&o.Bucket, "bucket", 16, "with --text/--ids: the sweep's query bucket (the finest resolution of Head over positions)")
	f.StringVar(&o.Out, "out", "", "with --text/--ids: the sweep's folder (default probe-explore-<text name> in the working directory)")
	f.BoolVar(&o.FullPass, "full-pass", false, "run all T tokens for a row instead of the tokens 0 … query (the pass is causal: same row)")
	threadsVar(f, &o.Threads)
	f.IntVar(&o.MaxQueue, "max-queue", d.MaxQueue, "distinct row passes that may wait for the model (more are answered 503)")
	f.StringVar(&o.FrameAncestors, "frame-ancestors", d.FrameAncestors, "pages that may show the explorer in a frame (CSP frame-ancestors sources; a notebook's iframe on loopback: 'http://127.0.0.1:* http://localhost:*')")
	extrapolationVar(f, &o.AllowExtrapolation)
	cmd.MarkFlagsMutuallyExclusive("ids", "text")
}

// runExplore opens the folder (after sweeping it when given --text or
// --ids) and serves it until interrupted.
func runExplore(opts *ExploreOptions) error {
	dir, err := opts.folder()
	if err != nil {
		return err
	}
	f, err := explore.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	o := explore.Defaults()
	o.Addr = net.JoinHostPort(opts.Addr, strconv.Itoa(opts.Port))
	o.FullPass, o.Threads, o.MaxQueue = opts.FullPass, opts.Threads, opts.MaxQueue
	o.FrameAncestors = opts.FrameAncestors
	if opts.Text == "" && opts.IDs == "" {
		o.ModelDir = opts.Model
	}
	s, err := explore.NewServer(f, o)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return s.Serve(ctx, func(url string) {
		fmt.Fprintf(opts.Stdout, "probe explore: %s\n  open %s\n", dir, url)
		if s.Token() != "" {
			fmt.Fprintf(opts.Stdout, "  listening beyond loopback: every request needs the token above (?token=… or the X-Probe-Token header)\n")
		}
		fmt.Fprintf(opts.Stdout, "  rows are cached in %s; Ctrl-C stops\n", filepath.Join(dir, explore.CacheDir))
		if opts.ready != nil {
			go func() {
				if !opts.ready(url) {
					stop()
				}
			}()
		}
	})
}

// folder returns the measurement folder: the argument, or the folder of
// the default sweep it runs first on --text/--ids.
func (opts *ExploreOptions) folder() (string, error) {
	if opts.Text == "" && opts.IDs == "" {
		if len(opts.Args) != 1 {
			return "", fmt.Errorf("want one measurement folder (probe explore <folder>), or --model with --text or --ids to sweep one first")
		}
		return opts.Args[0], nil
	}
	if len(opts.Args) > 0 {
		return "", fmt.Errorf("give either a folder (%s) or --text/--ids, not both", opts.Args[0])
	}
	if opts.Model == "" {
		return "", fmt.Errorf("--text/--ids need --model: the model to sweep")
	}
	in := opts.Text + opts.IDs
	abs, err := filepath.Abs(in)
	if err != nil {
		return "", err
	}
	out := opts.Out
	if out == "" {
		out = "probe-explore-" + strings.TrimSuffix(filepath.Base(in), filepath.Ext(in))
	}
	model := opts.Model
	if st, err := os.Stat(model); err == nil && st.IsDir() {
		if model, err = filepath.Abs(model); err != nil {
			return "", err
		}
	}
	so, flags := defaultsOf(NewCmdSweep)
	so.Stdout, so.Model.Name, so.Out, so.Formats, so.Progress = opts.Stdout, model, out, "parquet", true
	so.Plan.Lengths, so.Plan.Samples, so.Bucket, so.Threads, so.AllowExtrapolation = opts.Lengths, opts.Samples, opts.Bucket, opts.Threads, opts.AllowExtrapolation
	if opts.Text != "" {
		so.Input.Text = abs
	} else {
		so.Input.IDs = abs
	}
	so.CLIOptions, so.CommandLine = flagRecord(flags) // the manifest's record and resume line, as if typed
	fmt.Fprintf(opts.Stdout, "probe explore: sweeping %s at lengths %s (%d samples, buckets of %d) into %s first\n", in, opts.Lengths, opts.Samples, opts.Bucket, out)
	if err := runSweep(so); err != nil {
		return "", fmt.Errorf("the sweep before exploring: %w", err)
	}
	return out, nil
}
