package main

import (
	"io"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/model"
)

// TestCommandOptions: a command line fills the command's options (the runF
// receives them; nothing runs), the recorded options say which flags were
// given, and defaultsOf gives the flags' defaults, which probe demo runs
// with.
func TestCommandOptions(t *testing.T) {
	var got *SweepOptions
	cmd := NewCmdSweep(func(o *SweepOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--model", "m", "--ids", "i.json", "--lengths", "1k,2k", "--samples", "3", "--out", "o", "--format", "csv"})
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err != nil || got == nil {
		t.Fatalf("sweep: %v", err)
	}
	d := analysis.DefaultSweepOptions()
	if got.Model.Name != "m" || got.Input.IDs != "i.json" || got.Plan.Lengths != "1k,2k" || got.Plan.Samples != 3 || got.Out != "o" ||
		got.Formats != "csv" || got.Plan.K != d.KUnit || got.Model.Compute != string(model.ComputeF32) || !got.Model.MemoryCheck || !got.Progress {
		t.Errorf("sweep options %+v", got)
	}
	set := map[string]bool{}
	for _, o := range got.CLIOptions {
		set[o.Name] = o.Set
	}
	if !set["samples"] || set["k"] || len(got.CLIOptions) < 30 {
		t.Errorf("recorded options: samples set %v, k set %v, %d options", set["samples"], set["k"], len(got.CLIOptions))
	}

	def, flags := defaultsOf(NewCmdSweep)
	if def.Plan.Samples != d.Samples || def.Plan.Disjoint != d.Disjoint || def.BOSToken != d.BOSToken || def.Formats != "parquet" ||
		def.Lambda.Form != "reml" || def.Model.DeviationTokens != analysis.DefaultDeviationTokens || def.Model.Compute != string(model.ComputeF32) {
		t.Errorf("defaultsOf(NewCmdSweep) = %+v", def)
	}
	def.Model.Name, def.Plan.Samples, def.Progress = "m", 7, false
	if _, line := flagRecord(flags); strings.Join(line, " ") != "--model m --progress=false --samples 7" {
		t.Errorf("flagRecord of the changed defaults: %q", line)
	}
	if p, _ := defaultsOf(NewCmdPPL); p.Plan.Lengths != "256,512,1024,2048,4096" || p.Plan.K != 1024 {
		t.Errorf("defaultsOf(NewCmdPPL).Plan = %+v", p.Plan)
	}
	if g, _ := defaultsOf(NewCmdGDN); g.Stream.Shard != "0/1" || g.Stream.Formats != "parquet,csv" || g.WRows {
		t.Errorf("defaultsOf(NewCmdGDN) = %+v", g)
	}
}
