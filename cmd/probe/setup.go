package main

import (
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/filterlens/probe/report"
)

// cmdSetup fills the user cache with echarts.min.js so that reports made
// anywhere (outside the repository, by an installed binary) get
// interactive charts: `npm pack echarts@5.6.0` in a temporary directory,
// then report.InstallECharts checks the pinned SHA-256 and copies the file.
// --tgz installs from a tarball already at hand (offline machines).
// SetupOptions are the options of probe setup.
type SetupOptions struct {
	Stdout io.Writer
	Tgz    string
}

// NewCmdSetup builds probe setup; runF (nil: runSetup) runs it.
func NewCmdSetup(runF func(*SetupOptions) error) *cobra.Command {
	opts := &SetupOptions{}
	cmd := &cobra.Command{
		Use:     "setup [--tgz <echarts-5.6.0.tgz>]",
		Short:   "put echarts.min.js in the user cache (from npm) so that reports made anywhere are interactive",
		Example: "probe setup",
		RunE: func(c *cobra.Command, args []string) error {
			opts.Stdout = c.OutOrStdout()
			return orDefault(runF, runSetup)(opts)
		},
	}
	cmd.Args = noArgs("")
	f := cmd.Flags()
	f.StringVar(&opts.Tgz, "tgz", "", "install from this npm tarball of echarts@"+report.EChartsVersion+" instead of running npm pack")
	return cmd
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
