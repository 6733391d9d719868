package nb

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BinEnv names the environment variable that gives the probe binary
// (scripts/ci-notebooks.sh sets it); without it ProbeBinary builds one.
const BinEnv = "PROBE_BIN"

// ProbeBinary returns the probe command-line tool: $PROBE_BIN, else a
// binary built from the repository (go build, so it is rebuilt only when
// the sources changed) into Workdir("bin").
func ProbeBinary() (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := Workdir("bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/probe")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("nb: building probe: %v\n%s", err, out)
	}
	return bin, nil
}

// NotebookFrames are the pages ExploreOptions lets frame the explorer by
// default: a Jupyter server on loopback, any port.
const NotebookFrames = "http://127.0.0.1:* http://localhost:*"

// ExploreOptions are the settings of Explore.
type ExploreOptions struct {
	// FrameAncestors is passed to probe explore --frame-ancestors (default
	// NotebookFrames: Jupyter on loopback may show it in an iframe).
	FrameAncestors string
	// Height is the iframe's height in pixels (default 1100: the four
	// views in two rows).
	Height int
	// Wait bounds the wait for the server to listen (default 2 minutes:
	// opening a large folder indexes its table).
	Wait time.Duration
}

// Explorer is a probe explore server that Explore started for a folder: a
// separate process, so that it outlives the cell (each GoNB cell is a
// program of its own), recorded in Workdir("explore") so that later cells
// find it again.
type Explorer struct {
	Folder string `json:"folder"`
	URL    string `json:"url"`
	PID    int    `json:"pid"`
	Height int    `json:"height"`
}

// statePath is where the explorer of folder is recorded.
func statePath(folder string) (string, error) {
	dir, err := Workdir("explore")
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(folder))
	return filepath.Join(dir, hex.EncodeToString(h[:8])+".json"), nil
}

// Explore returns the explorer of folder (a measurement folder, or probe
// diag's CSV): the one a previous cell started when it still answers, else
// a new `probe explore --port 0` on loopback. Stop ends it.
func Explore(folder string, o ExploreOptions) (*Explorer, error) {
	if o.FrameAncestors == "" {
		o.FrameAncestors = NotebookFrames
	}
	if o.Height <= 0 {
		o.Height = 1100
	}
	if o.Wait <= 0 {
		o.Wait = 2 * time.Minute
	}
	abs, err := filepath.Abs(folder)
	if err != nil {
		return nil, err
	}
	state, err := statePath(abs)
	if err != nil {
		return nil, err
	}
	if e, err := running(state); err == nil {
		e.Height = o.Height
		return e, nil
	}
	bin, err := ProbeBinary()
	if err != nil {
		return nil, err
	}
	logPath := strings.TrimSuffix(state, ".json") + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "explore", abs, "--port", "0", "--frame-ancestors", o.FrameAncestors)
	cmd.Stdout, cmd.Stderr = logf, logf
	if root, err := RepoRoot(); err == nil {
		cmd.Dir = root // where it finds third_party/echarts as the reports do
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // its own session: it outlives the cell
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nb: starting %s explore: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(o.Wait)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("nb: probe explore %s ended (%v): %s", abs, err, strings.TrimSpace(string(b)))
		case <-time.After(100 * time.Millisecond):
		}
		if url := openURL(logPath); url != "" {
			e := &Explorer{Folder: abs, URL: url, PID: cmd.Process.Pid, Height: o.Height}
			b, _ := json.Marshal(e)
			if err := os.WriteFile(state, b, 0o644); err != nil {
				cmd.Process.Kill()
				return nil, err
			}
			cmd.Process.Release()
			return e, nil
		}
	}
	cmd.Process.Kill()
	return nil, fmt.Errorf("nb: probe explore %s did not listen within %v (log %s)", abs, o.Wait, logPath)
}

// openURL is the URL of the "open http://…" line probe explore prints ("":
// not yet).
func openURL(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "open "); ok && strings.HasPrefix(u, "http://") {
			return u
		}
	}
	return ""
}

// running reads a recorded explorer and checks that it answers for its
// folder.
func running(state string) (*Explorer, error) {
	b, err := os.ReadFile(state)
	if err != nil {
		return nil, err
	}
	var e Explorer
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(e.URL + "api/info")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var in struct{ Dir string }
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: status %d", e.URL, resp.StatusCode)
	}
	real := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	// The server names the folder (for probe diag's CSV, the CSV's folder), symlinks resolved.
	if d := real(in.Dir); d != real(e.Folder) && d != real(filepath.Dir(e.Folder)) {
		return nil, fmt.Errorf("%s serves %s, not %s", e.URL, in.Dir, e.Folder)
	}
	return &e, nil
}

// HTML shows the explorer in an iframe, with a link that opens it in a
// browser tab of its own.
func (e *Explorer) HTML() string {
	u := html.EscapeString(e.URL)
	return fmt.Sprintf(`<p><a href="%s" target="_blank" rel="noopener">probe explore %s</a> (a separate process; Stop ends it)</p>`+
		`<iframe src="%s" title="probe explore" style="width:100%%;height:%dpx;border:1px solid #ddd"></iframe>`,
		u, html.EscapeString(e.Folder), u, e.Height)
}

// Get fetches path (e.g. "api/grid?metric=neff") from the explorer and
// decodes its JSON answer into v.
func (e *Explorer) Get(path string, v any) error {
	c := http.Client{Timeout: 10 * time.Minute}
	resp, err := c.Get(e.URL + strings.TrimPrefix(path, "/"))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var msg struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&msg)
		return fmt.Errorf("%s: %s: %s", path, resp.Status, msg.Error)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Stop ends the explorer (SIGTERM: it shuts down) and forgets it. An
// explorer that no longer answers is only forgotten (its process id may
// have been reused).
func (e *Explorer) Stop() error {
	state, err := statePath(e.Folder)
	if err != nil {
		return err
	}
	if _, err := running(state); err != nil {
		os.Remove(state)
		return nil
	}
	os.Remove(state)
	p, err := os.FindProcess(e.PID)
	if err != nil {
		return err
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("nb: stopping probe explore (pid %d): %w", e.PID, err)
	}
	return nil
}
