package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/report"
)

// cmdSetup fills the user cache with echarts.min.js so that reports made
// anywhere (outside the repository, by an installed binary) get
// interactive charts: `npm pack echarts@5.6.0` in a temporary directory,
// then report.InstallECharts checks the pinned SHA-256 and copies the file.
// --tgz installs from a tarball already at hand (offline machines).
// SetupOptions are the options of probe setup.
type SetupOptions struct {
	cmdIO
	Tgz string
}

// flags declares the flags of probe setup into f and their relations.
func (o *SetupOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Tgz, "tgz", "", "install from this npm tarball of echarts@"+report.EChartsVersion+" instead of running npm pack")
}

// runSetup installs echarts.min.js in the user cache: from opts.Tgz, or
// from `npm pack echarts@<version>` run in a temporary folder.
func runSetup(opts *SetupOptions) error {
	if opts.Tgz == "" {
		npm, err := exec.LookPath("npm")
		if err != nil {
			return fmt.Errorf("setup: npm is not on PATH: install Node.js, or fetch echarts-%s.tgz elsewhere (`npm pack echarts@%s`) and pass it with --tgz",
				report.EChartsVersion, report.EChartsVersion)
		}
		tmp, err := os.MkdirTemp("", "probe-setup-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command(npm, "pack", "--silent", "echarts@"+report.EChartsVersion)
		cmd.Dir, cmd.Stderr = tmp, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("setup: `npm pack echarts@%s` failed (%v): check the network, or pass a tarball with --tgz", report.EChartsVersion, err)
		}
		opts.Tgz = filepath.Join(tmp, "echarts-"+report.EChartsVersion+".tgz")
	}
	dst, err := report.InstallECharts(opts.Tgz)
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "echarts %s (sha256 %s…) → %s: reports now have interactive charts anywhere\n", report.EChartsVersion, report.EChartsSHA256[:12], dst)
	return nil
}
