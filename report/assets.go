package report

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/filterlens/probe/internal/atomicfile"
)

// EChartsEnv names the environment variable that points at echarts.min.js.
const EChartsEnv = "PROBE_ECHARTS_JS"

// EChartsVersion is the echarts release the reports are made and tested
// with (the npm package echarts@5.6.0).
const EChartsVersion = "5.6.0"

// EChartsSHA256 is the SHA-256 of dist/echarts.min.js in the npm package
// echarts@5.6.0; `probe setup` refuses a download that differs.
const EChartsSHA256 = "bf4a223524e40b77c304bec67e1222cf551f14880cf42c69dc046558e11c07b1"

// EChartsRelPath is where .ci/setup.sh installs the npm echarts package,
// relative to the repository root (git-ignored; never committed).
const EChartsRelPath = "third_party/node_modules/echarts/dist/echarts.min.js"

// EChartsInstallHint tells a user how to get echarts.min.js.
const EChartsInstallHint = "run `probe setup` once (it copies echarts.min.js of npm's echarts@" + EChartsVersion +
	" into the user cache) or set " + EChartsEnv + " to an echarts.min.js"

// EChartsCachePath is the user-cache copy that `probe setup` writes:
// os.UserCacheDir()/probe/echarts/<EChartsVersion>/echarts.min.js
// ($XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS).
func EChartsCachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("report: no user cache directory for echarts (%v): set %s instead", err, EChartsEnv)
	}
	return filepath.Join(dir, "probe", "echarts", EChartsVersion, "echarts.min.js"), nil
}

// LocateECharts finds echarts.min.js for inlining, in this order:
//  1. $PROBE_ECHARTS_JS if set (it must be a file);
//  2. third_party/node_modules/echarts/dist/echarts.min.js in the working
//     directory or any parent, then beside the running executable or any
//     of its parents (a checkout after .ci/setup.sh);
//  3. the user cache that `probe setup` fills (EChartsCachePath).
//
// The error names every place it looked and says how to get the file.
func LocateECharts() (string, error) {
	if p := os.Getenv(EChartsEnv); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("report: %s=%s is not a file: %s", EChartsEnv, p, EChartsInstallHint)
		}
		return p, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if isFile(filepath.Join(d, EChartsRelPath)) {
				return filepath.Join(d, EChartsRelPath), nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	cache, err := EChartsCachePath()
	if err != nil {
		return "", err
	}
	if isFile(cache) {
		return cache, nil
	}
	return "", fmt.Errorf("report: echarts.min.js not found ($%s unset, no %s above %s, no %s): %s",
		EChartsEnv, EChartsRelPath, strings.Join(starts, " or "), cache, EChartsInstallHint)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// ChooseCharts settles how a command's report draws its charts, the same
// way in every command that writes one: with o.Static or an explicit
// o.ECharts it returns o unchanged (an explicit file that cannot be read is
// an error at Write); otherwise it looks for echarts.min.js and, when none
// is found, switches to static SVG charts and writes exactly one line to w
// saying so and how to get interactive charts.
func ChooseCharts(o WriteOptions, w io.Writer) WriteOptions {
	if o.Static || o.ECharts != "" {
		return o
	}
	p, err := LocateECharts()
	if err != nil {
		o.Static = true
		fmt.Fprintf(w, "note: echarts.min.js not found, so the charts are static SVG; for interactive charts, %s\n", EChartsInstallHint)
		return o
	}
	o.ECharts = p
	return o
}

// loadECharts reads the library and makes it safe to inline in a <script>.
func loadECharts(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("report: reading echarts: %w", err)
	}
	js := string(data)
	if !strings.Contains(js, "echarts") || len(js) < 100_000 {
		return "", fmt.Errorf("report: %s does not look like echarts.min.js (%d bytes): %s", path, len(js), EChartsInstallHint)
	}
	// "</script" would end the inline element early.
	return strings.ReplaceAll(js, "</script", `<\/script`), nil
}

// InstallECharts copies dist/echarts.min.js out of an npm tarball of
// echarts@EChartsVersion (what `npm pack echarts@5.6.0` writes) into the
// user cache (EChartsCachePath), after checking its SHA-256 against
// EChartsSHA256. It returns the installed path.
func InstallECharts(tgz string) (string, error) {
	f, err := os.Open(tgz)
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("report: %s is not an npm tarball (.tgz): %v", tgz, err)
	}
	tr := tar.NewReader(zr)
	const member = "package/dist/echarts.min.js"
	var js []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("report: reading %s: %v", tgz, err)
		}
		if h.Name == member {
			if js, err = io.ReadAll(io.LimitReader(tr, 64<<20)); err != nil {
				return "", fmt.Errorf("report: reading %s in %s: %v", member, tgz, err)
			}
			break
		}
	}
	if js == nil {
		return "", fmt.Errorf("report: %s has no %s: is it the npm package echarts@%s?", tgz, member, EChartsVersion)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(js)); sum != EChartsSHA256 {
		return "", fmt.Errorf("report: %s in %s has SHA-256 %s, want %s (echarts@%s): refusing to install it",
			member, tgz, sum, EChartsSHA256, EChartsVersion)
	}
	dst, err := EChartsCachePath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	if err := atomicfile.WriteBytes(dst, js); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	return dst, nil
}
