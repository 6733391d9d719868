package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EChartsEnv names the environment variable that points at echarts.min.js.
const EChartsEnv = "PROBE_ECHARTS_JS"

// EChartsRelPath is where .ci/setup.sh installs the npm echarts package,
// relative to the repository root (git-ignored; never committed).
const EChartsRelPath = "third_party/node_modules/echarts/dist/echarts.min.js"

// EChartsInstallHint tells a user how to get echarts.min.js.
const EChartsInstallHint = "run `bash .ci/setup.sh` in the repository (it runs `npm install --prefix third_party echarts@5.6.0`), " +
	"or set " + EChartsEnv + " to an echarts.min.js, or pass --static for a report with inline SVG and no JavaScript"

// LocateECharts finds echarts.min.js for inlining: $PROBE_ECHARTS_JS if set
// (it must exist), else third_party/node_modules/echarts/dist/echarts.min.js
// in the working directory or any parent, else the same beside the running
// executable or any of its parents. The error lists every place it looked.
func LocateECharts() (string, error) {
	if p := os.Getenv(EChartsEnv); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("report: %s=%s is not a file: %s", EChartsEnv, p, EChartsInstallHint)
		}
		return p, nil
	}
	var tried []string
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			p := filepath.Join(d, EChartsRelPath)
			tried = append(tried, p)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("report: echarts.min.js not found (looked at $%s and %s): %s",
		EChartsEnv, strings.Join(tried[:min(len(tried), 4)], ", ")+", …", EChartsInstallHint)
}

// loadECharts reads the library and makes it safe to inline in a <script>.
func loadECharts(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("report: reading echarts: %w", err)
	}
	js := string(data)
	if !strings.Contains(js, "echarts") || len(js) < 100_000 {
		return "", fmt.Errorf("report: %s does not look like echarts.min.js (%d bytes)", path, len(js))
	}
	// "</script" would end the inline element early.
	return strings.ReplaceAll(js, "</script", `<\/script`), nil
}
