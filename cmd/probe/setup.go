package main

import (
	"fmt"
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
func cmdSetup(args []string, w io.Writer) error {
	fs := newFlags("setup")
	tgz := fs.String("tgz", "", "install from this npm tarball of echarts@"+report.EChartsVersion+" instead of running npm pack")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *tgz == "" {
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
		*tgz = filepath.Join(tmp, "echarts-"+report.EChartsVersion+".tgz")
	}
	dst, err := report.InstallECharts(*tgz)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "echarts %s (sha256 %s…) → %s: reports now have interactive charts anywhere\n", report.EChartsVersion, report.EChartsSHA256[:12], dst)
	return nil
}
